{{/*
The image of one of the suite's programs: (list $ "etcd-operator") -> [repository/]etcd-operator:tag
*/}}
{{- define "suite.image" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- with $root.Values.image.repository }}{{ trimSuffix "/" . }}/{{ end }}{{ $name }}:{{ $root.Values.image.tag | default $root.Chart.AppVersion }}
{{- end }}

{{/* True ("true") when the operators manage every namespace. */}}
{{- define "suite.clusterWide" -}}
{{- if eq .Values.scope "clusterWide" }}true{{ else if eq .Values.scope "namespaced" }}{{ else }}{{ fail (printf "scope is namespaced or clusterWide, not %q" .Values.scope) }}{{ end }}
{{- end }}

{{/* The kustomize base's scope directory name. */}}
{{- define "suite.scopeDir" -}}
{{- if include "suite.clusterWide" . }}cluster-wide{{ else }}namespaced{{ end }}
{{- end }}

{{/* A file of files/ with the bases' namespace (etcd) replaced by the release's. */}}
{{- define "suite.inNamespace" -}}
{{- $root := index . 0 -}}
{{- $root.Files.Get (index . 1) | replace "namespace: etcd\n" (printf "namespace: %s\n" $root.Release.Namespace) -}}
{{- end }}

{{/* What every operator pod runs with: non-root, the runtime's seccomp profile (restricted). */}}
{{- define "suite.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "suite.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* Probes and port of every operator container. */}}
{{- define "suite.probes" -}}
ports:
  - {name: http, containerPort: 8080}
livenessProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 10
readinessProbe:
  httpGet: {path: /readyz, port: http}
  periodSeconds: 5
{{- end }}

{{/* The operator container's image and pull policy. */}}
{{- define "suite.containerImage" -}}
{{- $root := index . 0 -}}
image: {{ include "suite.image" . }}
{{- with $root.Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/*
Where and from what the operator pods run: pull secrets, node selector, tolerations and affinity,
the same for the three operators (values of the same names). Empty values render nothing.
*/}}
{{- define "suite.podPlacement" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
