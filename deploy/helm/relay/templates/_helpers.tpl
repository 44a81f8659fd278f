{{/* Labels of every object's metadata: the base's, plus Helm's. */}}
{{- define "relay.labels" -}}
app.kubernetes.io/part-of: byollm-relay
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end }}
