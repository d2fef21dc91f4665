{{/* The Secret holding the webhook's serving certificate (tls.crt, tls.key). */}}
{{- define "scheduler.tlsSecretName" -}}
{{- if eq .Values.webhook.tls.mode "secret" -}}
{{- required "scheduler.webhook.tls.secretName is required with scheduler.webhook.tls.mode=secret" .Values.webhook.tls.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "vnpu.fullname" (dict "ctx" . "component" "scheduler")) -}}
{{- end -}}
{{- end -}}

{{/*
The extender listener's address (config.host): empty is 127.0.0.1, or 0.0.0.0 with mutual TLS
(kube-scheduler then calls through the Service). A non-loopback address without mutual TLS is
refused unless config.allowUnauthenticatedExtender says so, as vnpu-scheduler itself does.
*/}}
{{- define "scheduler.extenderHost" -}}
{{- $tls := .Values.extender.tls.enabled -}}
{{- $host := .Values.config.host | default (ternary "0.0.0.0" "127.0.0.1" $tls) -}}
{{- $loopback := or (eq $host "localhost") (eq $host "::1") (hasPrefix "127." $host) -}}
{{- if and $tls $loopback -}}
{{- fail (printf "scheduler.config.host (%s) is a loopback address: with scheduler.extender.tls.enabled kube-scheduler calls the extender through the Service; leave it empty (0.0.0.0)" $host) -}}
{{- end -}}
{{- if not (or $loopback $tls .Values.config.allowUnauthenticatedExtender) -}}
{{- fail (printf "scheduler.config.host (%s) is not a loopback address: whoever reaches it could bind pods; set scheduler.extender.tls.enabled=true (mutual TLS), or scheduler.config.allowUnauthenticatedExtender=true where a NetworkPolicy lets kube-scheduler alone reach the port" $host) -}}
{{- end -}}
{{- $host -}}
{{- end -}}

{{/* The URL kube-scheduler calls the extender at: loopback in the pod, or HTTPS through the Service. */}}
{{- define "scheduler.extenderUrl" -}}
{{- if .Values.extender.tls.enabled -}}
{{- $name := include "vnpu.fullname" (dict "ctx" . "component" "scheduler") -}}
{{- .Values.extender.tls.url | default (printf "https://%s.%s.svc:%v" $name .Release.Namespace .Values.config.port) -}}
{{- else -}}
{{- printf "http://127.0.0.1:%v" .Values.config.port -}}
{{- end -}}
{{- end -}}

{{/* The extender's Secret: its serving certificate (tls.crt, tls.key) and the CA of its clients (ca.crt). */}}
{{- define "scheduler.extenderSecretName" -}}
{{- if eq .Values.extender.tls.mode "secret" -}}
{{- required "scheduler.extender.tls.secretName is required with scheduler.extender.tls.mode=secret" .Values.extender.tls.secretName -}}
{{- else -}}
{{- printf "%s-extender-tls" (include "vnpu.fullname" (dict "ctx" . "component" "scheduler")) -}}
{{- end -}}
{{- end -}}

{{/* kube-scheduler's Secret: its client certificate (tls.crt, tls.key) and the extender's CA (ca.crt). */}}
{{- define "scheduler.extenderClientSecretName" -}}
{{- if eq .Values.extender.tls.mode "secret" -}}
{{- required "scheduler.extender.tls.clientSecretName is required with scheduler.extender.tls.mode=secret" .Values.extender.tls.clientSecretName -}}
{{- else -}}
{{- printf "%s-extender-client" (include "vnpu.fullname" (dict "ctx" . "component" "scheduler")) -}}
{{- end -}}
{{- end -}}

{{/* Where vnpu-scheduler reads the extender's Secret, and kube-scheduler its client Secret. */}}
{{- define "scheduler.extenderTlsDir" -}}/etc/vnpu/extender-tls{{- end -}}
{{- define "scheduler.extenderClientDir" -}}/etc/kubernetes/vnpu-extender-client{{- end -}}
