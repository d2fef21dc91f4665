{{/* The Secret holding the webhook's serving certificate (tls.crt, tls.key). */}}
{{- define "scheduler.tlsSecretName" -}}
{{- if eq .Values.webhook.tls.mode "secret" -}}
{{- required "scheduler.webhook.tls.secretName is required with scheduler.webhook.tls.mode=secret" .Values.webhook.tls.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "vnpu.fullname" (dict "ctx" . "component" "scheduler")) -}}
{{- end -}}
{{- end -}}
