{{/* The chart's name, or nameOverride. */}}
{{- define "lockstep.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, used for object names: fullnameOverride, else the release name when it
already contains the chart's name, else "<release>-<chart>". At most 63 characters.
*/}}
{{- define "lockstep.fullname" -}}
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

{{- define "lockstep.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "lockstep.labels" -}}
helm.sh/chart: {{ include "lockstep.chart" . }}
{{ include "lockstep.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: lockstep
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels the Deployment, Service and PodDisruptionBudget select pods by. */}}
{{- define "lockstep.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lockstep.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "lockstep.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lockstep.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The PodDisruptionBudget's apiVersion: policy/v1 where the cluster serves it (Kubernetes 1.21 and
newer), else policy/v1beta1 (1.19 and 1.20; 1.25 removed it). A cluster's discovery (helm install
and upgrade, helm template --validate) lists policy/v1 only where it is served. `helm template`
without a cluster lists instead every group/version Helm was built with, policy/v1 included
whatever --kube-version says, and no kinds: hence the version check beside the group/version,
and no test of "policy/v1/PodDisruptionBudget", which would fail there on every version.
*/}}
{{- define "lockstep.pdbApiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "policy/v1") (semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version) -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end }}
{{- end }}

{{- define "lockstep.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The rules the operator needs where it manages TrainingJobs: exactly the calls it makes (the e2e
test `e2e_chart` records them and compares). Shared by the ClusterRole and the namespaced Role.
*/}}
{{- define "lockstep.managerRules" -}}
- apiGroups: ["lockstep.io"]
  resources: ["trainingjobs"]
  verbs: ["list", "watch", "delete"]
- apiGroups: ["lockstep.io"]
  resources: ["trainingjobs/status"]
  verbs: ["update"]
{{- if (.Values.tfjob).enabled }}
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs"]
  verbs: ["list", "watch", "delete"]
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs/status"]
  verbs: ["update"]
{{- end }}
- apiGroups: [""]
  resources: ["pods", "services"]
  verbs: ["list", "watch", "create", "delete"]
{{- if (.Values.kueue).enabled }}
# A Kueue pod group's pods: Kueue's finalizer off a stopped one being replaced, and
# retriable-in-group "false" once the job has ended (docs/tasks/queue-with-kueue.md).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["patch"]
{{- end }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["list", "watch", "create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch", "list"]
{{- if eq .Values.operator.gangScheduler "volcano" }}
- apiGroups: ["scheduling.volcano.sh"]
  resources: ["podgroups"]
  verbs: ["create"]
{{- else if eq .Values.operator.gangScheduler "scheduler-plugins" }}
- apiGroups: ["scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/*
A duration value, (list "its.name" value): written as given when it is a string (the schema
checks its form); a bare number, which YAML reads from "progressInterval: 10", fails with the
value's name and the unit it lacks.
*/}}
{{- define "lockstep.duration" -}}
{{- $name := index . 0 }}
{{- $value := index . 1 }}
{{- if not (kindIs "string" $value) }}
{{- fail (printf "%s: %v has no unit: write a duration such as \"%vs\" (ms, s, m or h)" $name $value $value) }}
{{- end }}
{{- $value }}
{{- end }}
