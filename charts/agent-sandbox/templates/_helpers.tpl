{{/*
Name of the controller's objects: "<release>-controller" when the release name contains the
chart name (release "agent-sandbox" gives "agent-sandbox-controller", the kustomize names),
else "<release>-<chart>-controller"; fullnameOverride replaces it. Cluster-scoped objects
carry this name too, so two releases never share a ClusterRole.
*/}}
{{- define "agent-sandbox.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- $base := .Release.Name -}}
{{- if not (contains $name .Release.Name) -}}
{{- $base = printf "%s-%s" .Release.Name $name -}}
{{- end -}}
{{- printf "%s-controller" ($base | trunc 41 | trimSuffix "-") -}}
{{- end -}}
{{- end -}}

{{- define "agent-sandbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that identify the release; "component" is added per object. */}}
{{- define "agent-sandbox.releaseLabels" -}}
app.kubernetes.io/name: {{ include "agent-sandbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agent-sandbox.selectorLabels" -}}
{{ include "agent-sandbox.releaseLabels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* Labels of every object but the Services (see serviceLabels). */}}
{{- define "agent-sandbox.labels" -}}
{{ include "agent-sandbox.commonLabels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "agent-sandbox.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "agent-sandbox.releaseLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels of a Service: (list . "metrics") or (list . "webhook"), so a ServiceMonitor can tell them apart. */}}
{{- define "agent-sandbox.serviceLabels" -}}
{{ include "agent-sandbox.commonLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Namespace of the leader-election Lease (and of the Role that grants it). */}}
{{- define "agent-sandbox.leaseNamespace" -}}
{{- .Values.controller.leaderElectionNamespace | default .Release.Namespace -}}
{{- end -}}

{{- define "agent-sandbox.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
One "--flag=value" argument when the value is set (null leaves the controller's default).
Integers come out of values.yaml as float64: print them as integers.
*/}}
{{- define "agent-sandbox.flag" -}}
{{- $value := index . 1 -}}
{{- if not (kindIs "invalid" $value) -}}
{{- if kindIs "float64" $value -}}
{{- if eq $value (floor $value) -}}
{{- $value = int64 $value -}}
{{- end -}}
{{- end }}
- {{ printf "--%s=%v" (index . 0) $value | quote }}
{{- end -}}
{{- end -}}

{{/* The controller's arguments. */}}
{{/* Where the snapshot registry's Secret is mounted (controller and node agent). */}}
{{- define "agent-sandbox.snapshotAuthDir" -}}
/etc/agent-sandbox/snapshot-registry
{{- end -}}
{{- define "agent-sandbox.snapshotAuthFile" -}}
{{ include "agent-sandbox.snapshotAuthDir" . }}/.dockerconfigjson
{{- end -}}

{{- define "agent-sandbox.args" -}}
{{- $c := .Values.controller -}}
- {{ printf "--leader-elect=%t" $c.leaderElect | quote }}
{{- if $c.leaderElect }}
{{- include "agent-sandbox.flag" (list "leader-election-namespace" $c.leaderElectionNamespace) }}
{{- end }}
{{- if $c.extensions }}
- "--extensions"
{{- if $c.idleShutdown }}
- "--idle-shutdown"
{{- end }}
{{- if .Values.snapshots.enabled }}
- {{ printf "--snapshot-registry=%s" .Values.snapshots.registry | quote }}
{{- if .Values.snapshots.registrySecret }}
- {{ printf "--snapshot-registry-auth-file=%s" (include "agent-sandbox.snapshotAuthFile" .) | quote }}
{{- end }}
{{- end }}
{{- end }}
- {{ printf "--webhook-service-name=%s" .Values.webhookServiceName | quote }}
- {{ printf "--webhook-namespace=%s" .Release.Namespace | quote }}
{{- include "agent-sandbox.flag" (list "cluster-domain" $c.clusterDomain) }}
{{- include "agent-sandbox.flag" (list "kube-api-qps" $c.kubeApiQps) }}
{{- include "agent-sandbox.flag" (list "kube-api-burst" $c.kubeApiBurst) }}
{{- include "agent-sandbox.flag" (list "sandbox-concurrent-workers" $c.sandboxConcurrentWorkers) }}
{{- include "agent-sandbox.flag" (list "enable-tracing" $c.enableTracing) }}
{{- include "agent-sandbox.flag" (list "enable-pprof" $c.enablePprof) }}
{{- include "agent-sandbox.flag" (list "enable-pprof-debug" $c.enablePprofDebug) }}
{{- include "agent-sandbox.flag" (list "pprof-block-profile-rate" $c.pprofBlockProfileRate) }}
{{- include "agent-sandbox.flag" (list "pprof-mutex-profile-fraction" $c.pprofMutexProfileFraction) }}
{{- include "agent-sandbox.flag" (list "sandbox-claim-concurrent-workers" $c.sandboxClaimConcurrentWorkers) }}
{{- include "agent-sandbox.flag" (list "sandbox-warm-pool-concurrent-workers" $c.sandboxWarmPoolConcurrentWorkers) }}
{{- include "agent-sandbox.flag" (list "sandbox-template-concurrent-workers" $c.sandboxTemplateConcurrentWorkers) }}
{{- include "agent-sandbox.flag" (list "sandbox-warm-pool-max-batch-size" $c.sandboxWarmPoolMaxBatchSize) }}
{{- include "agent-sandbox.flag" (list "enable-warm-pool-eviction" $c.enableWarmPoolEviction) }}
{{- include "agent-sandbox.flag" (list "sandbox-warm-pool-readiness-grace-period" $c.sandboxWarmPoolReadinessGracePeriod) }}
{{- include "agent-sandbox.flag" (list "sandbox-warm-pool-unschedulable-recheck-interval" $c.sandboxWarmPoolUnschedulableRecheckInterval) }}
{{- range $c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Refuse combinations the schema cannot express. */}}
{{- define "agent-sandbox.validate" -}}
{{- if and .Values.snapshots.enabled (not .Values.controller.extensions) -}}
{{- fail "snapshots.enabled needs controller.extensions=true: the SandboxSnapshot controller is an extension" -}}
{{- end -}}
{{- if and .Values.snapshots.enabled (not .Values.snapshots.registry) -}}
{{- fail "snapshots.enabled needs snapshots.registry (https://host[:port] of the snapshot registry)" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.controller.leaderElect) -}}
{{- fail (printf "replicaCount %d needs controller.leaderElect=true: without leader election every replica would reconcile the same objects" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if eq .Values.service.name .Values.webhookServiceName -}}
{{- fail (printf "service.name and webhookServiceName are both %q: the metrics and the webhook Service need different names" .Values.service.name) -}}
{{- end -}}
{{- end -}}
