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

{{/*
The operator's flags of the backup values, one per value that is set, as a
YAML list; empty when none is (the defaults), so the Deployment then has
the args of manifests/operator.
*/}}
{{- define "pgloop.backupArgs" -}}
{{- $b := .Values.backup | default dict -}}
{{- $args := list -}}
{{- $strings := list
  (list "backup-s3-endpoint" "endpoint") (list "backup-s3-bucket" "bucket") (list "backup-s3-region" "region")
  (list "backup-s3-secret" "secretName") (list "backup-s3-ca-key" "caKey") (list "archive-timeout" "archiveTimeout")
  (list "backup-schedule" "schedule") (list "backup-schedule-spread" "scheduleSpread") (list "backup-timeout" "timeout") -}}
{{- range $pair := $strings -}}
{{- with index $b (index $pair 1) -}}
{{- $args = append $args (printf "--%s=%v" (index $pair 0) .) -}}
{{- end -}}
{{- end -}}
{{- if not (kindIs "invalid" $b.retentionFull) -}}
{{- $args = append $args (printf "--backup-retention-full=%d" (int $b.retentionFull)) -}}
{{- end -}}
{{- if not (kindIs "invalid" $b.verify) -}}
{{- $args = append $args (printf "--backup-verify=%v" $b.verify) -}}
{{- end -}}
{{- with $b.archivingImages -}}
{{- $args = append $args (printf "--archiving-images=%s" (join "," .)) -}}
{{- end -}}
{{- if $args -}}
{{- toYaml $args -}}
{{- end -}}
{{- end }}
