{{/*
How the chart renders: every object is read from a file of manifests/ (linked into the chart as
`manifests`), the values are set on it, and it is written out with the release's namespace and
Helm's labels. So the chart cannot drift from the kustomize install; it can only add what a
value asks for.
*/}}

{{/*
muster.load: the objects of one file of manifests/, as a JSON list (named templates return
strings: callers `fromJsonArray` it). dict "root" $ "file" "base/deployment.yaml".
*/}}
{{- define "muster.load" -}}
{{- $path := printf "manifests/%s" .file -}}
{{- $text := .root.Files.Get $path -}}
{{- if not $text -}}
{{- fail (printf "%s is missing: charts/muster/manifests must link to the repository's manifests/ (or the packaged chart lost it)" $path) -}}
{{- end -}}
{{- $docs := list -}}
{{- range $part := regexSplit "(?m)^---[ \\t]*$" $text -1 -}}
{{- $doc := fromYaml $part -}}
{{- if hasKey $doc "Error" -}}
{{- fail (printf "%s: %s" $path $doc.Error) -}}
{{- end -}}
{{- if $doc -}}
{{- $docs = append $docs $doc -}}
{{- end -}}
{{- end -}}
{{- toJson $docs -}}
{{- end -}}

{{/*
muster.one: the only object of a file of manifests/, as JSON (callers `fromJson` it).
*/}}
{{- define "muster.one" -}}
{{- $docs := include "muster.load" . | fromJsonArray -}}
{{- if ne (len $docs) 1 -}}
{{- fail (printf "manifests/%s holds %d objects; the chart expects one" .file (len $docs)) -}}
{{- end -}}
{{- toJson (index $docs 0) -}}
{{- end -}}

{{/*
muster.labels: Helm's labels, added to every object the chart renders.
*/}}
{{- define "muster.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/*
muster.emit: one object out. dict "root" $ "object" OBJ ["notPartOf" true]. Adds Helm's labels
and (unless notPartOf: the example Queues belong to their teams) the kustomize install's
app.kubernetes.io/part-of: muster, then moves it into the release's namespace: the manifests
name muster-system wherever the namespace appears (metadata, the webhook's Service and
exclusions, the certificate's DNS names, the ServiceMonitor), so every mention is replaced.
*/}}
{{- define "muster.emit" -}}
{{- $object := .object -}}
{{- $meta := $object.metadata -}}
{{- $labels := $meta.labels | default dict -}}
{{- if not .notPartOf -}}
{{- $_ := set $labels "app.kubernetes.io/part-of" "muster" -}}
{{- end -}}
{{- $labels = mustMergeOverwrite $labels (include "muster.labels" .root | fromYaml) -}}
{{- $_ := set $meta "labels" $labels -}}
---
{{ toYaml $object | replace "muster-system" .root.Release.Namespace }}
{{ end -}}

{{/*
muster.emitAll: every object of a file of manifests/. dict "root" $ "file" F ["notPartOf" true].
*/}}
{{- define "muster.emitAll" -}}
{{- $root := .root -}}
{{- $notPartOf := .notPartOf -}}
{{- range $object := include "muster.load" . | fromJsonArray -}}
{{- include "muster.emit" (dict "root" $root "object" $object "notPartOf" $notPartOf) -}}
{{- end -}}
{{- end -}}

{{/*
muster.isSet: whether a value was given (null and absent mean "keep the manifest's").
*/}}
{{- define "muster.isSet" -}}
{{- if not (kindIs "invalid" .) }}true{{ end -}}
{{- end -}}
