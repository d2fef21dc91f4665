{{/*
The chart's mode, global.mode (a global, so that every subchart sees it): "classic" (the
vnpu-scheduler extender with kube-scheduler, the device plugin) or "dra" (kube-scheduler's own
DRA allocator, the npu.vnpu.io DRA driver; docs/dra.md). Takes any chart's root context.
*/}}
{{- define "vnpu.mode" -}}
{{- (.Values.global | default dict).mode | default "classic" -}}
{{- end -}}

{{/* "true" in DRA mode, "" in classic mode (for `if`). Takes any chart's root context. */}}
{{- define "vnpu.dra" -}}
{{- if eq (include "vnpu.mode" .) "dra" }}true{{ end -}}
{{- end -}}
