{{/*
Names, labels and images shared by the vnpu subcharts. Every template takes a dict:
  ctx        the calling chart's root context (.)
  component  scheduler, device-plugin or exporter
*/}}

{{/* The prefix of every object name: the release name, plus "-vnpu" unless it has "vnpu". */}}
{{- define "vnpu.prefix" -}}
{{- $global := .Values.global | default dict -}}
{{- if $global.fullnameOverride -}}
{{- $global.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "vnpu" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-vnpu" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* <prefix>-<component>, e.g. vnpu-scheduler. */}}
{{- define "vnpu.fullname" -}}
{{- printf "%s-%s" (include "vnpu.prefix" .ctx) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select a component's pods; never change them (selectors are immutable). */}}
{{- define "vnpu.selectorLabels" -}}
app.kubernetes.io/name: vnpu-{{ .component }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end -}}

{{/* Labels of every object of a component. */}}
{{- define "vnpu.labels" -}}
{{ include "vnpu.selectorLabels" . }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: vnpu
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 }}
{{- end -}}

{{/* The job name Prometheus should give a component's targets (the alerts expect these). */}}
{{- define "vnpu.jobLabel" -}}
vnpu.io/job: vnpu-{{ .component }}
{{- end -}}

{{/*
The image of a vnpu container: global.image.registry (where `make push` put the images),
then the component's image.repository, then its tag or global.image.tag, defaulting to the
chart's appVersion.
  image  the component's image value ({repository, tag})
*/}}
{{- define "vnpu.image" -}}
{{- $global := .ctx.Values.global.image -}}
{{- $own := .image | default dict -}}
{{- $repository := $own.repository -}}
{{- $tag := $own.tag | default $global.tag | default .ctx.Chart.AppVersion -}}
{{- if $global.registry -}}
{{- printf "%s/%s:%s" $global.registry $repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets of a pod from global.imagePullSecrets, or nothing. Takes the root context. */}}
{{- define "vnpu.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets -}}
imagePullSecrets:
{{- range . }}
  - name: {{ . | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* A component's log level: its own logLevel, else global.logLevel. Takes {ctx, level}. */}}
{{- define "vnpu.logLevel" -}}
{{- .level | default .ctx.Values.global.logLevel | default "info" -}}
{{- end -}}
