{{/*
The device config (global.deviceConfig): the ConfigMap's name, a checksum that rolls the pods
reading it, and the extended resources of every chip model for the extender's managedResources.
Each template takes the root context (.).
*/}}

{{- define "vnpu.deviceConfig.name" -}}
{{- .Values.global.deviceConfig.name -}}
{{- end -}}

{{- define "vnpu.deviceConfig.checksum" -}}
{{- .Values.global.deviceConfig.content | default "" | sha256sum -}}
{{- end -}}

{{/*
The chip models vnpu knows without a device config (vnpu_core.catalog.BUILTIN). A device config
can change and add models but never remove these, so their resources are always managed.
A test keeps this list equal to the catalog.
*/}}
{{- define "vnpu.builtinCommonWords" -}}
Ascend310P Ascend910A Ascend910B1 Ascend910B2 Ascend910B3 Ascend910B4 Ascend910B4-1 Ascend910C Ascend910C-24
{{- end -}}

{{/*
The parsed device config: a dict with key "entries" (the chip model entries, a list). Fails
with global.deviceConfig.content named when the document is not YAML of the expected shape.
*/}}
{{- define "vnpu.deviceConfig.entries" -}}
{{- $content := .Values.global.deviceConfig.content | default "" -}}
{{- $entries := list -}}
{{- if $content -}}
{{- $doc := fromYaml $content -}}
{{- if hasKey $doc "Error" -}}
{{- fail (printf "global.deviceConfig.content: not a YAML mapping: %s" (get $doc "Error")) -}}
{{- end -}}
{{- $vnpus := get $doc "vnpus" -}}
{{- if kindIs "slice" $vnpus -}}
{{- $entries = $vnpus -}}
{{- else if kindIs "map" $vnpus -}}
{{- $entries = get $vnpus "configs" | default list -}}
{{- if not (kindIs "slice" $entries) -}}
{{- fail "global.deviceConfig.content: vnpus.configs must be a list of chip models" -}}
{{- end -}}
{{- else if $vnpus -}}
{{- fail "global.deviceConfig.content: vnpus must be a list of chip models or a mapping with configs" -}}
{{- end -}}
{{- end -}}
{{- dict "entries" $entries | toJson -}}
{{- end -}}

{{/*
Every chip model's count, -memory and -core resource as JSON
[{"name": ..., "ignoredByScheduler": bool}]: the count resource is in node allocatable (false),
memory and core are accounted by the extender only (true). Names follow
vnpu_core.deviceconfig: resourceName defaults to huawei.com/<commonWord>, the others to
<resourceName>-memory and <resourceName>-core.
*/}}
{{- define "vnpu.deviceConfig.resources" -}}
{{- $seen := dict -}}
{{- $out := list -}}
{{- $given := dict -}}
{{- $added := list -}}
{{- range $i, $entry := (include "vnpu.deviceConfig.entries" . | fromJson).entries -}}
{{- if not (kindIs "map" $entry) -}}
{{- fail (printf "global.deviceConfig.content: chip model entry %d is not a mapping" $i) -}}
{{- end -}}
{{- if not $entry.commonWord -}}
{{- fail (printf "global.deviceConfig.content: chip model entry %d has no commonWord" $i) -}}
{{- end -}}
{{- $_ := set $given (toString $entry.commonWord) $entry -}}
{{- $added = append $added $entry -}}
{{- end -}}
{{- $models := list -}}
{{- $builtin := (include "vnpu.builtinCommonWords" .) | splitList " " -}}
{{- range $builtin -}}
{{- $models = append $models (get $given . | default (dict "commonWord" .)) -}}
{{- end -}}
{{- range $added -}}
{{- if not (has (toString .commonWord) $builtin) -}}
{{- $models = append $models . -}}
{{- end -}}
{{- end -}}
{{- range $models -}}
{{- $count := .resourceName | default (printf "huawei.com/%v" .commonWord) -}}
{{- $memory := .resourceMemoryName | default (printf "%s-memory" $count) -}}
{{- $core := .resourceCoreName | default (printf "%s-core" $count) -}}
{{- range $name, $ignored := dict $count false $memory true $core true -}}
{{- if not (hasKey $seen $name) -}}
{{- $_ := set $seen $name true -}}
{{- $out = append $out (dict "name" $name "ignoredByScheduler" $ignored) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
