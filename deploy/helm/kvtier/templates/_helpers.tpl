{{/* The release's base name: the release name where it holds "kvtier", else "<release>-kvtier". */}}
{{- define "kvtier.fullname" -}}
{{- if contains "kvtier" .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kvtier" .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The daemon's objects: kvtierd for the release "kvtier", as in deploy/kubernetes. */}}
{{- define "kvtier.daemon" -}}
{{- printf "%sd" (include "kvtier.fullname" .) -}}
{{- end -}}

{{- define "kvtier.selectorLabels" -}}
app.kubernetes.io/name: kvtier
app.kubernetes.io/component: kvtierd
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvtier.labels" -}}
{{ include "kvtier.selectorLabels" . }}
app.kubernetes.io/part-of: kvtier
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The pod's memory request and limit in GiB: the host tier plus the overhead. */}}
{{- define "kvtier.memoryGiB" -}}
{{- $host := int .Values.tiers.host.capacityGiB -}}
{{- $over := int .Values.tiers.host.memoryOverheadGiB -}}
{{- if lt $host 1 -}}
{{- fail (printf "tiers.host.capacityGiB %v: must be at least 1" .Values.tiers.host.capacityGiB) -}}
{{- end -}}
{{- if lt (mul $over 9) $host -}}
{{- fail (printf "tiers.host.memoryOverheadGiB %d is below a ninth of tiers.host.capacityGiB %d: kvtierd refuses a host tier above 90%% of its memory limit (at least %d)" $over $host (div (add $host 8) 9)) -}}
{{- end -}}
{{- add $host $over -}}
{{- end -}}

{{/* Mount paths of the Secrets; kvtierd.yaml names the files in them. */}}
{{- define "kvtier.authDir" -}}/etc/kvtier-auth{{- end -}}
{{- define "kvtier.tlsDir" -}}/etc/kvtier-tls{{- end -}}
{{- define "kvtier.clientCADir" -}}/etc/kvtier-client-ca{{- end -}}

{{/* kvtierd.yaml, from the values (keys sorted; fields: kvtierd --print-default-config). */}}
{{- define "kvtier.config" -}}
{{- $v := .Values -}}
{{- $disk := dict "capacity" $v.tiers.disk.capacity "chunk" $v.tiers.disk.chunk "admission" $v.tiers.disk.admission -}}
{{- if $v.tiers.disk.dirs -}}
{{- $_ := set $disk "dirs" $v.tiers.disk.dirs -}}
{{- end -}}
{{- $c := dict
  "server" (dict "socket" (printf "%s/kvtier.sock" $v.socketHostPath) "workers" (int $v.config.workers) "shutdown_grace_seconds" (int $v.config.shutdownGraceSeconds))
  "state_dir" $v.tiers.disk.stateHostPath
  "pools" (dict "allowed_dirs" (list $v.poolHostPath))
  "engines" (dict "default_codec" $v.config.defaultCodec)
  "host" (dict "capacity" (printf "%dGiB" (int $v.tiers.host.capacityGiB)) "chunk" $v.tiers.host.chunk "pin" $v.tiers.host.pin "persistent" false)
  "gpu" (dict "capacity" $v.tiers.gpu.capacity)
  "disk" $disk
  "index" (dict "sync" $v.config.indexSync)
  "metrics" (dict "listen" (printf "0.0.0.0:%d" (int $v.metrics.port)))
  "log" (dict "level" $v.config.logLevel)
-}}
{{- if ne (int $v.tiers.gpu.device) 0 -}}
{{- $_ := set $c.gpu "device" (int $v.tiers.gpu.device) -}}
{{- end -}}
{{- if $v.auth.tokensSecret -}}
{{- $_ := set $c "auth" (dict "tokens_file" (printf "%s/%s" (include "kvtier.authDir" .) $v.auth.tokensKey) "admin_tenants" $v.auth.adminTenants) -}}
{{- end -}}
{{- if $v.tls.enabled -}}
{{- if not $v.tls.secretName -}}
{{- fail "tls.enabled needs tls.secretName: a kubernetes.io/tls Secret with tls.crt and tls.key" -}}
{{- end -}}
{{- $t := dict "cert_file" (printf "%s/tls.crt" (include "kvtier.tlsDir" .)) "key_file" (printf "%s/tls.key" (include "kvtier.tlsDir" .)) -}}
{{- if $v.tls.clientCASecret -}}
{{- $_ := set $t "client_ca_file" (printf "%s/ca.crt" (include "kvtier.clientCADir" .)) -}}
{{- end -}}
{{- $_ := set $c "tcp" (dict "listen" (printf "0.0.0.0:%d" (int $v.tls.port)) "tls" $t) -}}
{{- end -}}
{{- toYaml (mergeOverwrite $c (deepCopy $v.config.extra)) -}}
{{- end -}}
