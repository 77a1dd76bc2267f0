{{/* The chart's name, or nameOverride. */}}
{{- define "vgpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name when it contains the chart's name. */}}
{{- define "vgpu.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The DaemonSet's selector: the base's `app` label. */}}
{{- define "vgpu.selectorLabels" -}}
app: {{ include "vgpu.fullname" . }}
{{- end }}

{{/* The labels of the pods and of every object, as in the base. */}}
{{- define "vgpu.podLabels" -}}
{{ include "vgpu.selectorLabels" . }}
app.kubernetes.io/name: {{ include "vgpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: device-plugin
{{- end }}

{{/* The labels of every object: the pods' and Helm's own. */}}
{{- define "vgpu.labels" -}}
{{ include "vgpu.podLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "vgpu.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vgpu.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* "true" when the plugin uses the Kubernetes API: to label its Node, to read the
     label that picks its profile, or to serve DRA. Else "". */}}
{{- define "vgpu.usesAPI" -}}
{{- if or .Values.labelNode .Values.profiles (include "vgpu.usesDRA" .) }}true{{ end }}
{{- end }}

{{/* "true" when a node may serve its GPUs through DRA: kubeletAPI dra, or a profile with
     flags.kubeletAPI dra. Else "". */}}
{{- define "vgpu.usesDRA" -}}
{{- $dra := eq .Values.kubeletAPI "dra" }}
{{- range $name, $profile := .Values.profiles }}
{{- if eq (toString (dig "flags" "kubeletAPI" "" ($profile | default dict))) "dra" }}{{ $dra = true }}{{ end }}
{{- end }}
{{- if $dra }}true{{ end }}
{{- end }}

{{/* The DRA driver's name the plugin has without -dra-driver-name. */}}
{{- define "vgpu.defaultDRADriverName" -}}gpu.unicore.mcyou.cc{{- end }}

{{/* Where the profiles ConfigMap is mounted: the -config directory. */}}
{{- define "vgpu.profilesDir" -}}/etc/virtual-gpu/profiles{{- end }}

{{/* Where the telemetry's collectors file is mounted. */}}
{{- define "vgpu.collectorsDir" -}}/etc/virtual-gpu/telemetry{{- end }}

{{/* The kubelet's PodResources directory, under its root directory. */}}
{{- define "vgpu.podResourcesDir" -}}
{{- printf "%s/pod-resources" (trimSuffix "/" .Values.kubeletRootDir) }}
{{- end }}

{{/* The kubelet's plugin registration directory (-kubelet-registry-dir), under its root
     directory: its plugin watcher finds the DRA driver's registration socket there. */}}
{{- define "vgpu.pluginsRegistryDir" -}}
{{- printf "%s/plugins_registry" (trimSuffix "/" .Values.kubeletRootDir) }}
{{- end }}

{{/* The kubelet's plugins directory (-kubelet-plugins-dir), under its root directory. */}}
{{- define "vgpu.pluginsDir" -}}
{{- printf "%s/plugins" (trimSuffix "/" .Values.kubeletRootDir) }}
{{- end }}

{{/* The DRA driver's socket directory: <plugins directory>/<driver name>. */}}
{{- define "vgpu.draPluginDir" -}}
{{- printf "%s/%s" (include "vgpu.pluginsDir" .) .Values.dra.driverName }}
{{- end }}

{{/* The MIG DeviceClass's name: migName, else mig.<driver name without a leading gpu.>. */}}
{{- define "vgpu.migDeviceClassName" -}}
{{- .Values.dra.deviceClass.migName | default (printf "mig.%s" (trimPrefix "gpu." .Values.dra.driverName)) }}
{{- end }}

{{/* The DeviceClass's name. */}}
{{- define "vgpu.deviceClassName" -}}
{{- .Values.dra.deviceClass.name | default .Values.dra.driverName }}
{{- end }}

{{/* The plugin's args: the machine or the profiles, metrics, labelling, telemetry, the
     PodResources socket when it moved, the kubelet API and DRA's settings where they are
     not the plugin's defaults, extraArgs. */}}
{{- define "vgpu.args" -}}
{{- if .Values.profiles }}
- -config={{ include "vgpu.profilesDir" . }}
{{- with .Values.defaultProfile }}
- -config-default={{ . }}
{{- end }}
{{- else }}
{{- if .Values.topology }}
- -topology={{ .Values.topology }}
{{- end }}
{{- if not (kindIs "invalid" .Values.devices) }}
- -devices={{ int64 .Values.devices }}
{{- else if not .Values.topology }}
- -devices=4
{{- end }}
{{- end }}
- -metrics-address=:{{ int64 .Values.metrics.port }}
{{- if .Values.labelNode }}
- -label-node
{{- end }}
{{- if .Values.telemetry.enabled }}
- -telemetry-address=:{{ int64 .Values.telemetry.port }}
{{- if .Values.telemetry.collectors }}
- -telemetry-collectors={{ include "vgpu.collectorsDir" . }}/collectors.csv
{{- end }}
{{- with .Values.telemetry.model }}
- -telemetry-model={{ . }}
{{- end }}
{{- if not (kindIs "invalid" .Values.telemetry.seed) }}
- -telemetry-seed={{ int64 .Values.telemetry.seed }}
{{- end }}
{{- if .Values.telemetry.perPod }}
- -telemetry-per-pod
{{- end }}
{{- if .Values.telemetry.writable }}
- -telemetry-writable
{{- end }}
{{- end }}
{{- if ne (include "vgpu.podResourcesDir" .) "/var/lib/kubelet/pod-resources" }}
- -pod-resources-socket={{ include "vgpu.podResourcesDir" . }}/kubelet.sock
{{- end }}
{{- if eq .Values.kubeletAPI "dra" }}
- -kubelet-api=dra
{{- end }}
{{- if include "vgpu.usesDRA" . }}
{{- if ne .Values.dra.driverName (include "vgpu.defaultDRADriverName" .) }}
- -dra-driver-name={{ .Values.dra.driverName }}
{{- end }}
{{- if ne (include "vgpu.pluginsRegistryDir" .) "/var/lib/kubelet/plugins_registry" }}
- -kubelet-registry-dir={{ include "vgpu.pluginsRegistryDir" . }}
- -kubelet-plugins-dir={{ include "vgpu.pluginsDir" . }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The flags the chart sets, with the value that sets them. */}}
{{- define "vgpu.managedFlags" -}}
devices: devices
topology: topology
config: profiles
config-default: defaultProfile
node-name: (the chart sets NODE_NAME from the downward API)
label-node: labelNode
metrics-address: metrics.port
telemetry-address: telemetry
telemetry-collectors: telemetry.collectors
telemetry-model: telemetry.model
telemetry-seed: telemetry.seed
telemetry-per-pod: telemetry.perPod
telemetry-writable: telemetry.writable
pod-resources-socket: kubeletRootDir
kubelet-api: kubeletAPI
dra-driver-name: dra.driverName
kubelet-registry-dir: kubeletRootDir
kubelet-plugins-dir: kubeletRootDir
log-format: logFormat
log-level: logLevel
{{- end }}

{{/* The flags a profile sets: with profiles, a flag or variable for one of them would
     override every profile. The schema of the configuration file lists them. */}}
{{- define "vgpu.profileFlags" -}}
- devices
- topology
- resource-name
- kubelet-api
- allocation-policy
- shared-devices-allocation-policy
- device-list-strategy
- replicas
- numa-report
- faults
- nvidia-smi
- visible-devices-env
- device-nodes
- telemetry-model
- telemetry-seed
- telemetry-per-pod
- telemetry-writable
- kubelet-api
- mig-strategy
- mig-config
{{- end }}

{{/* Checks of the values that the schema cannot express; each fails with what to change. */}}
{{- define "vgpu.validate" -}}
{{- $profiles := .Values.profiles | default dict }}
{{- $names := keys $profiles | sortAlpha }}
{{- range $names }}
{{- if or (gt (len .) 63) (not (regexMatch "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" .)) }}
{{- fail (printf "profiles.%s: a profile's name is a label value (at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric): nodes pick it with unicore.mcyou.cc/device-plugin.config=<name>" .) }}
{{- end }}
{{- end }}
{{- with .Values.defaultProfile }}
{{- if not $profiles }}
{{- fail (printf "defaultProfile %q: there are no profiles; set profiles.%s, or leave defaultProfile empty" . .) }}
{{- end }}
{{- if not (hasKey $profiles .) }}
{{- fail (printf "defaultProfile %q is not one of the profiles (%s)" . (join ", " $names)) }}
{{- end }}
{{- end }}
{{- with .Values.simulate.configDefault }}
{{- if not $profiles }}
{{- fail (printf "simulate.configDefault %q: there are no profiles; set profiles.%s, or leave simulate.configDefault empty" . .) }}
{{- end }}
{{- if not (hasKey $profiles .) }}
{{- fail (printf "simulate.configDefault %q is not one of the profiles (%s)" . (join ", " $names)) }}
{{- end }}
{{- end }}
{{- if and .Values.simulate.persistence.existingClaim (not .Values.simulate.persistence.enabled) }}
{{- fail "simulate.persistence.existingClaim without simulate.persistence.enabled: the state would go to an emptyDir; enable persistence or leave existingClaim empty" }}
{{- end }}
{{- if $profiles }}
{{- if .Values.topology }}
{{- fail (printf "topology %q with profiles: -topology would override every profile; set flags.topology in the profiles instead" .Values.topology) }}
{{- end }}
{{- if not (kindIs "invalid" .Values.devices) }}
{{- fail (printf "devices %v with profiles: -devices would override every profile; set flags.devices in the profiles instead" .Values.devices) }}
{{- end }}
{{- end }}
{{- if and $profiles (eq .Values.kubeletAPI "dra") }}
{{- fail "kubeletAPI dra with profiles: -kubelet-api would override every profile; set flags.kubeletAPI: dra in the profiles of the nodes that serve DRA instead" }}
{{- end }}
{{- if and .Values.telemetry.enabled (eq (int64 .Values.telemetry.port) (int64 .Values.metrics.port)) }}
{{- fail (printf "telemetry.port and metrics.port are both %v: they are two listeners" .Values.metrics.port) }}
{{- end }}
{{- $telemetrySet := dict }}
{{- if and .Values.telemetry.collectors (not .Values.telemetry.enabled) }}
{{- fail "telemetry.collectors without telemetry.enabled: it has no effect without the telemetry" }}
{{- end }}
{{- with .Values.telemetry.model }}{{ $_ := set $telemetrySet "model" "telemetryModel" }}{{ end }}
{{- if not (kindIs "invalid" .Values.telemetry.seed) }}{{ $_ := set $telemetrySet "seed" "telemetrySeed" }}{{ end }}
{{- if .Values.telemetry.perPod }}{{ $_ := set $telemetrySet "perPod" "telemetryPerPod" }}{{ end }}
{{- if .Values.telemetry.writable }}{{ $_ := set $telemetrySet "writable" "telemetryWritable" }}{{ end }}
{{- range $value, $field := $telemetrySet }}
{{- if not $.Values.telemetry.enabled }}
{{- fail (printf "telemetry.%s without telemetry.enabled: it has no effect without the telemetry" $value) }}
{{- end }}
{{- if $profiles }}
{{- fail (printf "telemetry.%s with profiles: the flag would override every profile; set flags.%s in the profiles instead" $value $field) }}
{{- end }}
{{- end }}
{{- $managed := include "vgpu.managedFlags" . | fromYaml }}
{{- $profileFlags := include "vgpu.profileFlags" . | fromYamlArray }}
{{- range .Values.extraArgs }}
{{- $flag := regexReplaceAll "^--?([^=]*).*$" (toString .) "${1}" }}
{{- if hasKey $managed $flag }}
{{- fail (printf "extraArgs: %s is set by the chart: use %s" . (get $managed $flag)) }}
{{- end }}
{{- if and $profiles (has $flag $profileFlags) }}
{{- fail (printf "extraArgs: %s with profiles would override every profile; set it in the profiles instead" .) }}
{{- end }}
{{- end }}
{{- range .Values.extraEnv }}
{{- $name := toString .name }}
{{- if eq $name "NODE_NAME" }}
{{- fail "extraEnv: NODE_NAME is set by the chart, from the downward API" }}
{{- end }}
{{- if hasPrefix "VGPU_" $name }}
{{- $flag := trimPrefix "VGPU_" $name | lower | replace "_" "-" }}
{{- if hasKey $managed $flag }}
{{- fail (printf "extraEnv: %s is set by the chart: use %s" $name (get $managed $flag)) }}
{{- end }}
{{- if and $profiles (has $flag $profileFlags) }}
{{- fail (printf "extraEnv: %s with profiles would override every profile; set it in the profiles instead" $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The simulator's name: the full name with -simulator for a trailing -device-plugin
     (virtual-gpu-simulator for the README's release, as in deploy/components/simulate),
     else the full name and -simulator. */}}
{{- define "vgpu.simulatorName" -}}
{{- $full := include "vgpu.fullname" . }}
{{- if hasSuffix "-device-plugin" $full }}
{{- printf "%s-simulator" (trimSuffix "-device-plugin" $full) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-simulator" (trunc 53 $full | trimSuffix "-") }}
{{- end }}
{{- end }}

{{/* The simulator Deployment's selector. */}}
{{- define "vgpu.simulatorSelectorLabels" -}}
app: {{ include "vgpu.simulatorName" . }}
{{- end }}

{{/* The labels of the simulator's pods and objects, as in deploy/components/simulate. */}}
{{- define "vgpu.simulatorPodLabels" -}}
{{ include "vgpu.simulatorSelectorLabels" . }}
app.kubernetes.io/name: {{ include "vgpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: simulator
{{- end }}

{{/* The labels of every simulator object: the pods' and Helm's own. */}}
{{- define "vgpu.simulatorLabels" -}}
{{ include "vgpu.simulatorPodLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The simulator's state directory: the PVC's mount and -state (its default). */}}
{{- define "vgpu.simulateStateDir" -}}/var/lib/virtual-gpu/simulate{{- end }}

{{/* The nodes the simulator picks without -node-selector. */}}
{{- define "vgpu.defaultSimulateSelector" -}}kwok.x-k8s.io/node=fake{{- end }}

{{/* The simulator's profile of a node without the profile label: simulate.configDefault,
     else defaultProfile. */}}
{{- define "vgpu.simulateConfigDefault" -}}
{{- .Values.simulate.configDefault | default .Values.defaultProfile }}
{{- end }}

{{/* The simulator's args: the state directory, metrics, the log; the DaemonSet's profiles
     (its ConfigMap), or without profiles the DaemonSet's machine; the kubelet API and the DRA
     driver's name as the DaemonSet's; the node selector where it is not the default. */}}
{{- define "vgpu.simulateArgs" -}}
- simulate
- -state={{ include "vgpu.simulateStateDir" . }}
- -metrics-address=:{{ int64 .Values.metrics.port }}
- -log-format={{ .Values.logFormat }}
{{- with .Values.simulate.logLevel }}
- -log-level={{ . }}
{{- end }}
{{- if .Values.profiles }}
- -config={{ include "vgpu.profilesDir" . }}
{{- with include "vgpu.simulateConfigDefault" . }}
- -config-default={{ . }}
{{- end }}
{{- else }}
{{- if .Values.topology }}
- -topology={{ .Values.topology }}
{{- end }}
{{- if not (kindIs "invalid" .Values.devices) }}
- -devices={{ int64 .Values.devices }}
{{- else if not .Values.topology }}
- -devices=4
{{- end }}
{{- end }}
{{- if eq .Values.kubeletAPI "dra" }}
- -kubelet-api=dra
{{- end }}
{{- if ne .Values.dra.driverName (include "vgpu.defaultDRADriverName" .) }}
- -dra-driver-name={{ .Values.dra.driverName }}
{{- end }}
{{- if ne .Values.simulate.selectNodes (include "vgpu.defaultSimulateSelector" .) }}
- -node-selector={{ .Values.simulate.selectNodes }}
{{- end }}
{{- end }}

{{/* The simulator's state claim: existingClaim, else the chart's own; "" without persistence. */}}
{{- define "vgpu.simulateClaimName" -}}
{{- if .Values.simulate.persistence.enabled }}
{{- .Values.simulate.persistence.existingClaim | default (include "vgpu.simulatorName" .) }}
{{- end }}
{{- end }}
