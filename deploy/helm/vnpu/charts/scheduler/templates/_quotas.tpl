{{/*
The tenants.yaml text of scheduler.tenants: the values as YAML, or the text as given; empty
when unset. Fails when tenantsConfig is set too, or when the text is not a YAML mapping.
*/}}
{{- define "scheduler.tenantsText" -}}
{{- $tenants := .Values.tenants -}}
{{- if and $tenants .Values.tenantsConfig -}}
{{- fail (printf "scheduler.tenants and scheduler.tenantsConfig (%s) are both set: give the teams in scheduler.tenants (the chart renders their ConfigMap) or name an existing ConfigMap in scheduler.tenantsConfig, not both" .Values.tenantsConfig) -}}
{{- end -}}
{{- if kindIs "string" $tenants -}}
{{- $parsed := fromYaml $tenants -}}
{{- if hasKey $parsed "Error" -}}
{{- fail (printf "scheduler.tenants: not a YAML mapping with a teams: list (%s)" $parsed.Error) -}}
{{- end -}}
{{- trim $tenants -}}
{{- else if $tenants -}}
{{- toYaml $tenants -}}
{{- end -}}
{{- end -}}

{{/* The name of the tenants ConfigMap the chart renders from scheduler.tenants. */}}
{{- define "scheduler.tenantsName" -}}
{{- printf "%s-tenants" (include "vnpu.fullname" (dict "ctx" . "component" "scheduler")) -}}
{{- end -}}

{{/* --tenants-config: the chart's own ConfigMap, scheduler.tenantsConfig, or empty (no teams). */}}
{{- define "scheduler.tenantsConfig" -}}
{{- if include "scheduler.tenantsText" . -}}
{{- printf "%s/%s" .Release.Namespace (include "scheduler.tenantsName" .) -}}
{{- else -}}
{{- .Values.tenantsConfig -}}
{{- end -}}
{{- end -}}
