{{/*
CEL shared by the scheduler's admission webhooks (their matchConditions) and the
ValidatingAdmissionPolicies of the parent chart, so both agree on what an NPU pod and a
scheduling decision are.

An NPU pod is one with a container or init container whose limits or requests name a
resource under huawei.com/: vnpu's chip models (huawei.com/<CW>, -memory, -core), HAMi's
(the same names) and those of Huawei's own device plugin under Volcano (huawei.com/Ascend910,
huawei.com/npu-core, ...). A prefix rather than the device config's list, so a chip model
added to the ConfigMap later, or a name another plugin publishes, is covered without a new
render.
*/}}

{{/* The prefix of every NPU resource name. */}}
{{- define "vnpu.npuResourcePrefix" -}}
huawei.com/
{{- end -}}

{{/* CEL: container `c` asks for an NPU resource (in limits or requests). */}}
{{- define "vnpu.cel.npuContainer" -}}
{{- $prefix := include "vnpu.npuResourcePrefix" . -}}
has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, r.startsWith('{{ $prefix }}'))) || (has(c.resources.requests) && c.resources.requests.exists(r, r.startsWith('{{ $prefix }}'))))
{{- end -}}

{{/* CEL: the Pod `object` is an NPU pod. */}}
{{- define "vnpu.cel.npuPod" -}}
{{- $container := include "vnpu.cel.npuContainer" . -}}
object.spec.containers.exists(c, {{ $container }}) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, {{ $container }}))
{{- end -}}

{{/*
CEL: annotation key `k` carries a scheduling decision: what vnpu-scheduler, HAMi's scheduler
and Volcano write to say which chips a pod holds, and the device plugins' answers to it. The
device plugin grants chips from them and the schedulers rebuild usage and quota from them.
  hami.io/<CW>-devices-to-allocate, hami.io/<CW>-devices-allocated   the chips, per container
  huawei.com/<CW>                           runtime info (vnpu, HAMi, Volcano's HAMi mode);
                                            under MindCluster huawei.com/Ascend910,
                                            huawei.com/npu-core, huawei.com/AscendReal
  hami.io/vgpu-node, vgpu-time, bind-phase, bind-time, predicate-time   the bind
  vnpu.io/reserved                          a gang member's chips kept for its bind
Every huawei.com/ key counts but huawei.com/vnpu-mode, which a pod sets to ask for soft mode.
*/}}
{{- define "vnpu.cel.decisionKey" -}}
(k.startsWith('hami.io/') && (k.endsWith('-devices-to-allocate') || k.endsWith('-devices-allocated'))) || k in ['hami.io/vgpu-node', 'hami.io/vgpu-time', 'hami.io/bind-phase', 'hami.io/bind-time', 'predicate-time', 'vnpu.io/reserved'] || (k.startsWith('huawei.com/') && k != 'huawei.com/vnpu-mode')
{{- end -}}
