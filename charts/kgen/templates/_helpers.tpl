{{/* The chart's name, or nameOverride. */}}
{{- define "kgen.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name: fullnameOverride, or the release name when it
already holds the chart's name, or release-chart. 63 characters at most, as
names in labels must be.
*/}}
{{- define "kgen.fullname" -}}
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

{{/* The labels that select the release's pods; they never change. */}}
{{- define "kgen.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kgen.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of every object. */}}
{{- define "kgen.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kgen.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kgen
{{- end }}

{{- define "kgen.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kgen.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The ConfigMap of kgen's record of where each rule made children and
watched parents: one per release, so that two releases in one namespace
never read each other's (one would release the other's parents). The
release's full name and "-state", which is kgen-state for a release
named kgen, the name every kgen used before it could be chosen.
*/}}
{{- define "kgen.stateName" -}}
{{- default (printf "%s-state" (include "kgen.fullname" .)) .Values.stateConfigMap }}
{{- end }}

{{/* The leader-election Lease's name. */}}
{{- define "kgen.leaseName" -}}
{{- default (include "kgen.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/*
kgen.writerArgs is, as a JSON list, the arguments of kgen's container that
tell how its replicas agree on who writes: leader election and its Lease,
or sharding, and any such flag in controller.extraArgs (the prefixes of
kgenctl's cleanup.WriterFlags; one in two arguments, "--leader-elect-id"
"NAME", or a bare "--leader-elect", is refused: the hook compares
arguments one by one). Replicas whose writer arguments differ do
not see each other's Leases, so they must never run together: the
pre-upgrade and pre-rollback hook (stop-job.yaml) stops the release's pods
that run with others. The Deployment carries them in its annotation
kgen.dev/writers; the chart's tests check that its container has exactly
these.
*/}}
{{- define "kgen.writerArgs" -}}
{{- $args := list (printf "--leader-elect=%t" .Values.leaderElection.enabled) }}
{{- if .Values.leaderElection.enabled }}
{{- $args = concat $args (list (printf "--leader-elect-namespace=%s" .Release.Namespace) (printf "--leader-elect-id=%s" (include "kgen.leaseName" .))) }}
{{- end }}
{{- if .Values.sharding.enabled }}
{{- $args = concat $args (list "--shards" (printf "--leader-elect-namespace=%s" .Release.Namespace)) }}
{{- end }}
{{- range $arg := .Values.controller.extraArgs | default list }}
{{- if has (toString $arg) (list "--leader-elect" "--leader-elect-namespace" "--leader-elect-id") }}
{{- fail (printf "controller.extraArgs holds %s without =VALUE: write %s=VALUE as one argument (or use leaderElection.enabled), so that the upgrade hook can tell when the replicas' Lease changes" $arg $arg) }}
{{- end }}
{{- range list "--leader-elect=" "--leader-elect-namespace=" "--leader-elect-id=" "--shards" }}
{{- if hasPrefix . (toString $arg) }}
{{- $args = append $args (toString $arg) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $args }}
{{- end }}

{{/*
The labels of the pods of hooks and tests: the release's, without
app.kubernetes.io/name, so that the Deployment's selector, its Service and
its PodDisruptionBudget never count them as kgen's replicas (the cleanup
hook waits for those to be gone). Call it with (list $ "component").
*/}}
{{- define "kgen.hookPodLabels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: kgen
{{- end }}

{{/*
kgen.ruleFiles is "true" when kgen has rules files: the values give rules,
or name an existing ConfigMap of them. Only then is the rules ConfigMap
mounted and passed with --rules.
*/}}
{{- define "kgen.ruleFiles" -}}
{{- if or .Values.rules .Values.existingRulesConfigMap }}true{{ end }}
{{- end }}

{{/*
kgen.checkRuleSources fails the release when kgen would have no rules at
all: no rules files and no Rule objects.
*/}}
{{- define "kgen.checkRuleSources" -}}
{{- if and (not (include "kgen.ruleFiles" .)) (not .Values.ruleObjects.enabled) }}
{{- fail "no rules: ruleObjects.enabled is false and neither rules nor existingRulesConfigMap is set, so kgen would have nothing to run. Give rules (--set-file rules.NAME=FILE), or serve Rule objects (ruleObjects.enabled=true)" }}
{{- end }}
{{- end }}

{{/*
kgen.checkReplicas fails the release when its replicas would not work
together: more than one without leader election or sharding would all
write; sharding needs at least two, and excludes leader election.
*/}}
{{- define "kgen.checkReplicas" -}}
{{- $replicas := int .Values.replicaCount }}
{{- /* What kgen runs with: the values' flags, then controller.extraArgs (the last of a flag wins). */}}
{{- $args := include "kgen.writerArgs" . | fromJsonArray }}
{{- $leader := include "kgen.flagOn" (list $args "--leader-elect") }}
{{- $shards := include "kgen.flagOn" (list $args "--shards") }}
{{- if ne (toString .Values.leaderElection.enabled) (toString (eq $leader "true")) }}
{{- fail (printf "controller.extraArgs sets --leader-elect to %s, but leaderElection.enabled is %t: set leaderElection.enabled instead (the chart's checks, Lease grant and upgrade hook follow it)" (eq $leader "true" | toString) .Values.leaderElection.enabled) }}
{{- end }}
{{- if ne (toString .Values.sharding.enabled) (toString (eq $shards "true")) }}
{{- fail (printf "controller.extraArgs sets --shards to %s, but sharding.enabled is %t: set sharding.enabled instead (the chart's checks and grants follow it)" (eq $shards "true" | toString) .Values.sharding.enabled) }}
{{- end }}
{{- if .Values.sharding.enabled }}
{{- if .Values.leaderElection.enabled }}
{{- fail "sharding.enabled and leaderElection.enabled are exclusive: with sharding every replica works, each on its own parents. Set leaderElection.enabled=false" }}
{{- end }}
{{- if lt $replicas 2 }}
{{- fail (printf "sharding.enabled needs replicaCount of 2 or more, not %d: one shard is one kgen" $replicas) }}
{{- end }}
{{- else if and (gt $replicas 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount is %d but leaderElection.enabled is false: every replica would write. Enable leader election or sharding, or run one replica" $replicas) }}
{{- end }}
{{- end }}

{{/*
kgen.flagOn is "true" when a boolean flag is on at the end of a list of
arguments, as kgenctl parses them: the last "--NAME" or "--NAME=VALUE"
wins, and VALUE is true as Go's strconv.ParseBool reads it. Call it with
(list $args "--NAME").
*/}}
{{- define "kgen.flagOn" -}}
{{- $name := index . 1 }}
{{- $on := false }}
{{- range $arg := index . 0 }}
{{- $a := toString $arg }}
{{- if eq $a $name }}
{{- $on = true }}
{{- else if hasPrefix (printf "%s=" $name) $a }}
{{- $on = has (trimPrefix (printf "%s=" $name) $a) (list "1" "t" "T" "true" "TRUE" "True") }}
{{- end }}
{{- end }}
{{- if $on }}true{{ end }}
{{- end }}

{{/*
kgen.cleanupEnabled is "true" when the pre-delete cleanup hook runs: it is
enabled and there are rules to read the parent kinds from, in files or in
Rule objects.
*/}}
{{- define "kgen.cleanupEnabled" -}}
{{- if and .Values.cleanup.enabled (or (include "kgen.ruleFiles" .) .Values.ruleObjects.enabled) }}true{{ end }}
{{- end }}

{{- define "kgen.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "kgen.fullname" .)) .Values.existingRulesConfigMap }}
{{- end }}

{{- define "kgen.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
kgen.checkRules fails the release when a PolicyRule holds "*", unless
rbac.allowWildcards is set: the rules kgenctl rbac writes never need one,
and a wildcard copied from elsewhere would silently give kgen the cluster.
Call it with (list "where" $rules $root).
*/}}
{{- define "kgen.checkRules" -}}
{{- $where := index . 0 }}
{{- $root := index . 2 }}
{{- if not $root.Values.rbac.allowWildcards }}
{{- range $i, $r := index . 1 }}
{{- range $field := list "apiGroups" "resources" "verbs" "nonResourceURLs" }}
{{- if has "*" (get $r $field | default list) }}
{{- fail (printf "%s[%d].%s holds \"*\": kgen never needs a wildcard (generate the rules with 'kgenctl rbac -o helm-values'), or set rbac.allowWildcards" $where $i $field) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
kgen.checkMetrics fails the release on metrics values that do not go
together, with the message kgenctl run would give at start.
*/}}
{{- define "kgen.checkMetrics" -}}
{{- $extra := .Values.controller.extraArgs | default list }}
{{- $secure := include "kgen.flagOn" (list (prepend $extra (printf "--metrics-secure=%t" .Values.metrics.secure)) "--metrics-secure") }}
{{- if ne (toString .Values.metrics.secure) (toString (eq $secure "true")) }}
{{- fail (printf "controller.extraArgs sets --metrics-secure to %s, but metrics.secure is %t: set metrics.secure instead (the Service, the ServiceMonitor and the grants follow it)" (eq $secure "true" | toString) .Values.metrics.secure) }}
{{- end }}
{{- if not .Values.metrics.secure }}
{{- if .Values.metrics.certSecret }}
{{- fail "metrics.certSecret needs metrics.secure: without it /metrics is plain HTTP" }}
{{- end }}
{{- if include "kgen.flagOn" (list $extra "--profiling") }}
{{- fail "--profiling in controller.extraArgs needs metrics.secure: /debug/pprof is never served without authentication and authorization" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
kgen.grants is "true" when the PolicyRules given grant a verb on a
resource. Call it with (list $rules group resource verb).
*/}}
{{- define "kgen.grants" -}}
{{- $group := index . 1 }}
{{- $resource := index . 2 }}
{{- $verb := index . 3 }}
{{- $yes := false }}
{{- range index . 0 }}
{{- $groups := .apiGroups | default list }}
{{- $names := .resources | default list }}
{{- $verbs := .verbs | default list }}
{{- if and (not .resourceNames) (or (has $group $groups) (has "*" $groups)) (or (has $resource $names) (has "*" $names)) (or (has $verb $verbs) (has "*" $verbs)) }}
{{- $yes = true }}
{{- end }}
{{- end }}
{{- if $yes }}true{{ end }}
{{- end }}

{{/*
kgen.goneNamespaces is, as a JSON list, the namespaces of
rbac.rules.namespaces that do not exist at a helm upgrade, or are being
deleted and have lost the release's Role already (the API server refuses
to create one there): the rules' Roles there are left out, so that a
namespace deleted while a rule still names it does not fail every upgrade
(kgen runs the rule in its other namespaces, and says so). A namespace
being deleted that still has the Role keeps it: kgen may still release
the parents there. Only at an upgrade, told by the release's Deployment
being there (Helm's lookup; nothing under helm template): a namespace
missing at install is an error, as helm reports it.
*/}}
{{- define "kgen.goneNamespaces" -}}
{{- $gone := list }}
{{- $fullname := include "kgen.fullname" . }}
{{- if lookup "apps/v1" "Deployment" .Release.Namespace $fullname }}
{{- range $namespace, $_ := .Values.rbac.rules.namespaces }}
{{- $ns := lookup "v1" "Namespace" "" $namespace }}
{{- if or (not $ns) (and $ns.metadata.deletionTimestamp (not (lookup "rbac.authorization.k8s.io/v1" "Role" $namespace $fullname))) }}
{{- $gone = append $gone $namespace }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $gone }}
{{- end }}

{{/*
kgen.releaseRules is, as JSON, the rules by namespace ("" for the
ClusterRole) that let kgen finish with what its record still holds where
the values no longer grant it: list and patch on each parent resource of
the record's annotation kgen.dev/release (kgen removes its finalizer from
the parents there), and get, list, watch, patch and delete on each child
resource of its annotation kgen.dev/release-children (kgen prunes the
children of ids a rule no longer has, or lets them go, there), read from
the cluster (Helm's lookup; nothing under helm template), each verb that
kgen holds now and the new values do not grant. What kgen holds now is
what this release granted it (a Role or ClusterRole Helm marks as this
release's, not one of the same name made otherwise): for the parents, its
ClusterRole and release ClusterRole, and in a namespace its Role and
release Role there too, and patch held cluster-wide stays cluster-wide,
as a namespace's Roles go with it when it is deleted; for a child kind,
the same when the values grant no verb on it there (dropped whole: kept
until kgen has pruned it and the record drops it), else its ClusterRole
and Role alone, so that verbs the values take from a kind a running rule
still makes are kept one upgrade only (the record names every kind a
running rule makes).
So the annotations, which kgen writes, can keep a grant an administrator
made, never add one. A namespace where neither Role of the release is
found is left out: it is gone, or kgen's rights there come from
elsewhere. An entry that is not a resource name is ignored, and so is an
annotation of another shape.
*/}}
{{- define "kgen.releaseRules" -}}
{{- $fullname := include "kgen.fullname" . }}
{{- $release := printf "%s-release" $fullname }}
{{- $cluster := concat (.Values.rbac.rules.cluster | default list) (.Values.rbac.extraRules | default list) }}
{{- $annotations := dict }}
{{- $state := lookup "v1" "ConfigMap" .Release.Namespace (include "kgen.stateName" .) }}
{{- with $state }}{{ with .metadata }}{{ with .annotations }}
{{- $annotations = . }}
{{- end }}{{ end }}{{ end }}
{{- /* (annotation, verbs, the release's roles that count as held, whether patch held cluster-wide stays so) */}}
{{- $sources := list (list "kgen.dev/release" (list "list" "patch") true) (list "kgen.dev/release-children" (list "get" "list" "watch" "patch" "delete") false) }}
{{- $out := dict }}
{{- $clusterPatch := dict }}
{{- range $source := $sources }}
{{- $held := dict }}
{{- with index $annotations (index $source 0) }}
{{- $held = fromJson . }}
{{- end }}
{{- if or (not (kindIs "map" $held)) (hasKey $held "Error") }}{{/* not JSON (fromJson's answer; no namespace is named Error), or not an object */}}
{{- $held = dict }}
{{- end }}
{{- $wanted := index $source 1 }}
{{- $parents := index $source 2 }}
{{- /* what the release's ClusterRole holds, and its release ClusterRole */}}
{{- $clusterOwn := list }}
{{- $clusterKept := list }}
{{- if $held }}
{{- with lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" $fullname }}{{ if include "kgen.ofRelease" (list $ .) }}{{ $clusterOwn = .rules | default list }}{{ end }}{{ end }}
{{- with lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" $release }}{{ if include "kgen.ofRelease" (list $ .) }}{{ $clusterKept = .rules | default list }}{{ end }}{{ end }}
{{- end }}
{{- $clusterHolds := concat $clusterOwn $clusterKept }}
{{- range $namespace, $resources := $held }}
{{- if kindIs "slice" $resources }}
{{- $granted := $cluster }}
{{- $own := $clusterOwn }}
{{- $kept := $clusterKept }}
{{- $exists := true }}
{{- if $namespace }}
{{- $granted = concat (index ($.Values.rbac.rules.namespaces | default dict) $namespace | default list) $cluster }}
{{- $exists = false }}
{{- with lookup "rbac.authorization.k8s.io/v1" "Role" $namespace $fullname }}
{{- if include "kgen.ofRelease" (list $ .) }}
{{- $own = concat $own (.rules | default list) }}
{{- $exists = true }}
{{- end }}
{{- end }}
{{- with lookup "rbac.authorization.k8s.io/v1" "Role" $namespace $release }}
{{- if include "kgen.ofRelease" (list $ .) }}
{{- $kept = concat $kept (.rules | default list) }}
{{- $exists = true }}
{{- end }}
{{- end }}
{{- end }}
{{- $rules := index $out $namespace | default list }}
{{- range $resources }}
{{- if and $exists (kindIs "string" .) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" .) }}
{{- $parts := splitn "." 2 . }}
{{- $resource := $parts._0 }}
{{- $group := $parts._1 | default "" }}
{{- /* A parent's grants, and a child kind's that the values drop whole, are kept from the release Role too, until the record drops the scope; a child kind the values still grant some verb on keeps its other verbs one upgrade only (the record names every kind a running rule makes) */}}
{{- $holds := concat $own $kept }}
{{- if not $parents }}
{{- range $verb := $wanted }}
{{- if include "kgen.grants" (list $granted $group $resource $verb) }}
{{- $holds = $own }}
{{- end }}
{{- end }}
{{- end }}
{{- $verbs := list }}
{{- range $verb := $wanted }}
{{- if and (include "kgen.grants" (list $holds $group $resource $verb)) (not (include "kgen.grants" (list $granted $group $resource $verb))) }}
{{- if and $parents $namespace (eq $verb "patch") (include "kgen.grants" (list $clusterHolds $group $resource $verb)) }}
{{- /* held cluster-wide, kept so: deleting the namespace deletes its Roles, in no set order with the parents */}}
{{- $_ := set $clusterPatch (printf "%s/%s" $group $resource) (list $group $resource) }}
{{- else }}
{{- $verbs = append $verbs $verb }}
{{- end }}
{{- end }}
{{- end }}
{{- if $verbs }}
{{- $rules = append $rules (dict "apiGroups" (list $group) "resources" (list $resource) "verbs" $verbs) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $rules }}
{{- $_ := set $out $namespace $rules }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key, $gr := $clusterPatch }}
{{- $_ := set $out "" (append (index $out "" | default list) (dict "apiGroups" (list (index $gr 0)) "resources" (list (index $gr 1)) "verbs" (list "patch"))) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
kgen.ofRelease is "true" when a Role or ClusterRole (looked up) belongs to
this release, as Helm marks what it installs: one of another name's, or
made by hand, is not what this release grants kgen. Call it with
(list $root object).
*/}}
{{- define "kgen.ofRelease" -}}
{{- $root := index . 0 }}
{{- $meta := (index . 1).metadata | default dict }}
{{- $ann := $meta.annotations | default dict }}
{{- if and (eq (index $ann "meta.helm.sh/release-name" | default "") $root.Release.Name) (eq (index $ann "meta.helm.sh/release-namespace" | default "") $root.Release.Namespace) }}true{{ end }}
{{- end }}

{{/*
kgen.rulesData is the data of the rules ConfigMap: a file per entry of the
values' rules, its text, or its Rule documents as YAML. The validate hook
checks the same files before an install or an upgrade.
*/}}
{{- define "kgen.rulesData" -}}
{{- range $name, $rules := .Values.rules }}
{{- $file := ternary $name (printf "%s.yaml" $name) (or (hasSuffix ".yaml" $name) (hasSuffix ".yml" $name)) }}
{{- if kindIs "string" $rules }}
{{ $file }}: |
  {{- $rules | nindent 2 }}
{{- else if kindIs "slice" $rules }}
{{ $file }}: |
  {{- range $i, $rule := $rules }}
  {{- if $i }}
  ---
  {{- end }}
  {{- toYaml $rule | nindent 2 }}
  {{- end }}
{{- else }}
{{ $file }}: |
  {{- toYaml $rules | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}
