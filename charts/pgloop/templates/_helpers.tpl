{{/*
The objects keep the names of manifests/operator (pgloop-operator, the
Lease's too), so one release of the chart runs per cluster, like the
kustomization: the CRD and the ClusterRole are cluster-wide anyway.
*/}}

{{/* Selector labels: those of manifests/operator, never changed by an upgrade. */}}
{{- define "pgloop.selectorLabels" -}}
app.kubernetes.io/name: pgloop
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of every object: the selector's, and Helm's usual ones. */}}
{{- define "pgloop.labels" -}}
{{ include "pgloop.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "pgloop.serviceAccountName" -}}
{{ required "serviceAccount.name is required" .Values.serviceAccount.name }}
{{- end }}

{{/* The ServiceAccount, as the subject of a binding. */}}
{{- define "pgloop.subjects" -}}
subjects:
- kind: ServiceAccount
  name: {{ include "pgloop.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
