package mapper

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Mapping describes one API resource as discovery reports it.
type Mapping struct {
	Group        string   `json:"group"`
	Version      string   `json:"version"`
	Kind         string   `json:"kind"`
	Resource     string   `json:"resource"`
	Namespaced   bool     `json:"namespaced"`
	SingularName string   `json:"singularName,omitempty"`
	ShortNames   []string `json:"shortNames,omitempty"`
	Categories   []string `json:"categories,omitempty"`
	Subresources []string `json:"subresources,omitempty"`
	Verbs        []string `json:"verbs,omitempty"`
}

// GroupVersionKind returns the mapping's kind with its group and version.
func (m Mapping) GroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: m.Group, Version: m.Version, Kind: m.Kind}
}

// GroupVersionResource returns the mapping's resource with its group and version.
func (m Mapping) GroupVersionResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: m.Group, Version: m.Version, Resource: m.Resource}
}

// HasSubresource reports whether discovery lists the named subresource
// (such as "status" or "scale") for the mapping's resource.
func (m Mapping) HasSubresource(name string) bool {
	return slices.Contains(m.Subresources, name)
}

// ErrNotFound is matched, through errors.Is, by every error that means the
// API server does not serve what was asked for.
var ErrNotFound = errors.New("not served by the API server")

// NotFoundError says that a reference or kind matched nothing the API server
// serves, and what was searched.
type NotFoundError struct {
	// Ref is the input as given.
	Ref string
	// Searched says what the input was compared with.
	Searched string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%q is not served by the API server (searched %s)", e.Ref, e.Searched)
}

// Is makes errors.Is(err, ErrNotFound) true for a *NotFoundError.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ErrUnavailable is matched, through errors.Is, by every error that means
// discovery could not read a group version the API server lists (an
// aggregated API whose server is down): what was asked for may be served
// there, so it is not ErrNotFound, and objects of its kinds may exist.
var ErrUnavailable = errors.New("API group version unavailable in discovery")

// UnavailableError says that a reference or kind matched nothing discovery
// could read, and which group versions it could not read that may hold it.
type UnavailableError struct {
	// Ref is the input as given.
	Ref string
	// Failed are the group versions whose discovery failed, and why.
	Failed map[schema.GroupVersion]error
	// Searched says what the reference was compared with, among what
	// discovery could read; empty for an exact kind.
	Searched string
}

func (e *UnavailableError) Error() string {
	gvs := slices.SortedFunc(maps.Keys(e.Failed), func(a, b schema.GroupVersion) int { return strings.Compare(a.String(), b.String()) })
	parts := make([]string, 0, len(gvs))
	for _, gv := range gvs {
		parts = append(parts, fmt.Sprintf("%s: %v", gv, e.Failed[gv]))
	}
	if e.Searched != "" {
		// Most likely a typo, in a cluster where some aggregated API is
		// down: say first that nothing matched.
		return fmt.Sprintf("%q is not served by the API group versions discovery could read (searched %s); it may be served where discovery failed: %s",
			e.Ref, e.Searched, strings.Join(parts, "; "))
	}
	return fmt.Sprintf("%q cannot be mapped now, and it may be served where discovery failed: %s", e.Ref, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrUnavailable) true for an *UnavailableError.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Mapper answers GVK and name questions from live, cached discovery.
// It is safe for concurrent use.
type Mapper struct {
	discovery  discovery.CachedDiscoveryInterface
	rest       *restmapper.DeferredDiscoveryRESTMapper
	categories restmapper.CategoryExpander

	// view is the flat view of the cached discovery documents, built on
	// first use and dropped by Reset; the controller asks ResourceFor for
	// every child it writes, so this must not be rebuilt per call.
	mu   sync.Mutex
	view *discovered
	// watched reports whether a Watcher keeps the cache true; nil
	// without one (see setWatched).
	watched func() bool
	// changedAt is when a Watcher last announced a change of each group
	// (allGroups: of any group), and resetAt when a miss last reset the
	// cache.
	changedAt map[string]time.Time
	resetAt   time.Time
	// unavailableAt is when a lookup in a failed group version last
	// reset the cache (see unavailableResets).
	unavailableAt time.Time
}

// recentChange is how long after a Watcher announced a change of a group a
// miss of a kind of that group still resets the cache: discovery may serve
// a new kind a moment after its CRD is established.
const recentChange = 30 * time.Second

// New returns a Mapper over the given discovery client, cached in memory.
func New(client discovery.DiscoveryInterface) *Mapper {
	cached := memory.NewMemCacheClient(client)
	return &Mapper{
		changedAt:  map[string]time.Time{},
		discovery:  cached,
		rest:       restmapper.NewDeferredDiscoveryRESTMapper(cached),
		categories: restmapper.NewDiscoveryCategoryExpander(cached),
	}
}

// NewForConfig returns a Mapper that discovers through the given REST config.
func NewForConfig(config *rest.Config) (*Mapper, error) {
	client, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	return New(client), nil
}

// RESTMapper returns the underlying RESTMapper, for code that wants the
// meta.RESTMapper interface. It shares the Mapper's cache.
func (m *Mapper) RESTMapper() meta.ResettableRESTMapper { return m.rest }

// Reset drops everything cached, so the next question asks the API server.
func (m *Mapper) Reset() {
	// Both halves under the lock: a view built between them would be read
	// from the cache being dropped, and stay older than the RESTMapper.
	m.mu.Lock()
	defer m.mu.Unlock()
	m.view = nil
	m.rest.Reset()
}

// ResourceFor returns the mapping of an exact group, version and kind.
// A miss resets the cache and asks once more before it reports an error that
// matches ErrNotFound, or ErrUnavailable when discovery could not read the
// kind's group version; while a Watcher keeps the cache true, a miss resets
// it only shortly after a change of the kind's group, and at most once a
// second. A lookup in a group version discovery could not read resets it
// at most once per unavailableRetry, Watcher or not.
func (m *Mapper) ResourceFor(gvk schema.GroupVersionKind) (Mapping, error) {
	mapping, err := m.resourceFor(gvk)
	if errors.Is(err, ErrNotFound) && m.missResets(gvk.Group) || errors.Is(err, ErrUnavailable) && m.unavailableResets() {
		m.Reset()
		mapping, err = m.resourceFor(gvk)
	}
	return mapping, err
}

// missResets reports whether a miss of a kind of group should reset the
// cache, and if so records that it does. While watched, only a recent
// change of that group (or of unknown groups) does: a CRD of another group
// deleted or installed does not have every waiting rule poll discovery for
// the next 30 seconds.
func (m *Mapper) missResets(group string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.watched != nil && m.watched() {
		recent := now.Sub(m.changedAt[group]) < recentChange || now.Sub(m.changedAt[allGroups]) < recentChange
		if !recent || now.Sub(m.resetAt) < time.Second {
			return false
		}
	}
	m.resetAt = now
	return true
}

// unavailableRetry is how often a lookup in a group version that discovery
// could not read reads discovery again. A Watcher does not make that
// needless: the view is rebuilt at any change of any group, and one
// rebuilt while an API was briefly unreadable (an aggregated server rolling
// out, a 429) would keep it unavailable until the next change of any
// group.
const unavailableRetry = 5 * time.Second

// unavailableResets reports whether a lookup in a failed group version
// should reset the cache, at most once per unavailableRetry, and if so
// records that it does.
func (m *Mapper) unavailableResets() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if now.Sub(m.unavailableAt) < unavailableRetry {
		return false
	}
	m.unavailableAt = now
	return true
}

// setWatched tells the Mapper whether a Watcher keeps its cache true: while
// watched returns true, a miss does not ask discovery again. nil means no
// Watcher.
func (m *Mapper) setWatched(watched func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watched = watched
}

// changed resets the cache after a Watcher saw a change of these groups
// (allGroups for unknown ones).
func (m *Mapper) changed(groups []string) {
	m.mu.Lock()
	now := time.Now()
	for _, g := range groups {
		m.changedAt[g] = now
	}
	// Forget what can no longer open a window, so the map stays as small
	// as the groups that changed in the last half minute.
	maps.DeleteFunc(m.changedAt, func(_ string, at time.Time) bool { return now.Sub(at) >= recentChange })
	m.mu.Unlock()
	m.Reset()
}

func (m *Mapper) resourceFor(gvk schema.GroupVersionKind) (Mapping, error) {
	groups, err := m.groups()
	if err != nil {
		return Mapping{}, err
	}
	if e, ok := groups.byGVK[gvk]; ok {
		return e.mapping(), nil
	}
	// Before the RESTMapper, which reads the same failed discovery and
	// would call the kind not served.
	if failed := groups.failedFor(query{group: &gvk.Group, version: gvk.Version}); len(failed) > 0 {
		return Mapping{}, &UnavailableError{Ref: gvkString(gvk), Failed: failed}
	}
	rm, err := m.rest.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return Mapping{}, &NotFoundError{Ref: gvkString(gvk), Searched: "the kinds of " + gvk.GroupVersion().String()}
	}
	if err != nil {
		return Mapping{}, fmt.Errorf("map %s: %w", gvkString(gvk), err)
	}
	// The RESTMapper also answers kinds the view does not list (a kind in
	// lower case, a List kind, an empty version): take the view's entry of
	// the resource it found, under the kind as the RESTMapper names it.
	find := func(d *discovered) (Mapping, bool) {
		for _, e := range d.entries {
			if e.gvk.GroupVersion() == rm.Resource.GroupVersion() && e.resource.Name == rm.Resource.Resource {
				m := e.mapping()
				m.Kind = rm.GroupVersionKind.Kind
				return m, true
			}
		}
		return Mapping{}, false
	}
	if mapping, ok := find(groups); ok {
		return mapping, nil
	}
	bare := Mapping{
		Group: gvk.Group, Version: gvk.Version, Kind: rm.GroupVersionKind.Kind,
		Resource:   rm.Resource.Resource,
		Namespaced: rm.Scope.Name() == meta.RESTScopeNameNamespace,
	}
	// The view lacks the resource: the RESTMapper may have read the shared
	// cache after the view was built from it. Build the view again, from
	// what the RESTMapper read, rather than answer without the resource's
	// subresources (a parent without "status" gets no status). Once per
	// view and resource: the RESTMapper also makes up resources discovery
	// never lists (configmaplists for a ConfigMapList).
	m.mu.Lock()
	if groups.unlisted[rm.Resource] {
		m.mu.Unlock()
		return bare, nil
	}
	if m.view == groups {
		m.view = nil
	}
	m.mu.Unlock()
	if groups, err = m.groups(); err != nil {
		return Mapping{}, err
	}
	if mapping, ok := find(groups); ok {
		return mapping, nil
	}
	m.mu.Lock()
	groups.unlisted[rm.Resource] = true
	m.mu.Unlock()
	return bare, nil
}

// Resolve returns every resource the reference may mean, the preferred first.
// A reference is any of: group/version/Kind, version/Kind (core group),
// group/name, Kind.version.group, resource.version.group, name.group, a kind,
// a plural or singular resource name, a short name, or a category. Kinds and
// names compare without regard to case. More than one result means the
// reference is ambiguous; a category yields all its resources. Nothing found
// resets the cache and tries once more, then returns an error that matches
// ErrNotFound, or ErrUnavailable when a group version discovery could not
// read may hold the reference.
func (m *Mapper) Resolve(ref string) ([]Mapping, error) {
	if strings.TrimSpace(ref) == "" {
		return nil, errors.New("empty resource reference")
	}
	found, err := m.resolve(ref)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
		m.Reset()
		found, err = m.resolve(ref)
	}
	return found, err
}

// Resolver resolves references as Mapper.Resolve does.
type Resolver interface {
	Resolve(ref string) ([]Mapping, error)
}

var _ Resolver = (*Mapper)(nil)

// AnyVersion returns the mapping of a kind in any version the API server
// serves it in, the preferred first, or an error matching ErrNotFound: a
// kind whose objects are still there though the version a record names
// is no longer served (a CRD that stopped serving v1alpha1 and serves v1).
func AnyVersion(r Resolver, gk schema.GroupKind) (Mapping, error) {
	found, err := r.Resolve(gk.Group + "/" + gk.Kind)
	if err != nil {
		return Mapping{}, err
	}
	for _, m := range found {
		if m.Group == gk.Group && m.Kind == gk.Kind {
			return m, nil
		}
	}
	return Mapping{}, fmt.Errorf("%s: %w", gk, ErrNotFound)
}

// CachedAnyVersion returns the mapping of a kind in its version, or else in
// any version the API server serves it in, from the discovery the Mapper
// has read: unlike ResourceFor and AnyVersion, a miss never reads
// discovery again. It is for lookups made often of kinds that may not be
// served, where a stale answer does no harm. A miss is an error that
// matches ErrNotFound, or ErrUnavailable when discovery could not read a
// version of the kind's group.
func (m *Mapper) CachedAnyVersion(gvk schema.GroupVersionKind) (Mapping, error) {
	groups, err := m.groups()
	if err != nil {
		return Mapping{}, err
	}
	if e, ok := groups.byGVK[gvk]; ok {
		return e.mapping(), nil
	}
	var found *entry
	for _, e := range groups.entries {
		if e.gvk.GroupKind() == gvk.GroupKind() && (found == nil || e.preferred && !found.preferred) {
			found = e
		}
	}
	if found != nil {
		return found.mapping(), nil
	}
	if failed := groups.failedFor(query{group: &gvk.Group}); len(failed) > 0 {
		return Mapping{}, &UnavailableError{Ref: gvkString(gvk), Failed: failed}
	}
	return Mapping{}, &NotFoundError{Ref: gvkString(gvk), Searched: "the kinds of group " + gvk.Group}
}

// versionPattern matches Kubernetes API version names such as v1, v2beta1.
var versionPattern = regexp.MustCompile(`^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$`)

// query is one reading of a reference: a name to match, maybe within a
// group and a version. A nil group means any group.
type query struct {
	group   *string
	version string
	name    string
}

// readings lists the ways a reference can be read, most specific first, as
// kubectl's resource builder tries them.
func readings(ref string) []query {
	str := func(s string) *string { return &s }
	parts := strings.Split(ref, "/")
	switch len(parts) {
	case 3: // group/version/Kind
		return []query{{group: str(parts[0]), version: parts[1], name: parts[2]}}
	case 2:
		if versionPattern.MatchString(parts[0]) { // version/Kind in the core group
			return []query{{group: str(""), version: parts[0], name: parts[1]}}
		}
		return []query{{group: str(parts[0]), name: parts[1]}} // group/name
	case 1:
	default:
		return nil
	}
	var qs []query
	if name, rest, ok := strings.Cut(ref, "."); ok {
		// name.version.group, as in Deployment.v1.apps or deployments.v1.apps.
		if version, group, ok := strings.Cut(rest, "."); ok && versionPattern.MatchString(version) {
			qs = append(qs, query{group: str(group), version: version, name: name})
		}
		// name.group, as in deployments.apps or octopodes.example.com.
		qs = append(qs, query{group: str(rest), name: name})
	}
	return append(qs, query{name: ref})
}

func (m *Mapper) resolve(ref string) ([]Mapping, error) {
	groups, err := m.groups()
	if err != nil {
		return nil, err
	}
	if !strings.ContainsAny(ref, "./") {
		if grs, ok := m.categories.Expand(ref); ok && len(grs) > 0 {
			var out []Mapping
			seen := map[schema.GroupResource]bool{}
			for _, gr := range grs {
				if seen[gr] {
					continue // the expander lists a resource once per version
				}
				seen[gr] = true
				if e := groups.preferred(gr); e != nil {
					out = append(out, e.mapping())
				}
			}
			if len(out) > 0 {
				return out, nil
			}
		}
	}
	for _, q := range readings(ref) {
		if found := groups.match(q, matchName); len(found) > 0 {
			return found, nil
		}
		// Short names only count when no full name matches, as in kubectl.
		if found := groups.match(q, matchShortName); len(found) > 0 {
			return found, nil
		}
	}
	// A reading of any group is one of a bare name: a dotted one
	// (Widget.v1.apps) names its group, and that was read.
	failed := map[schema.GroupVersion]error{}
	for _, q := range readings(ref) {
		if q.group != nil || !strings.ContainsAny(ref, "./") {
			maps.Copy(failed, groups.failedFor(q))
		}
	}
	searched := fmt.Sprintf("kinds, resource names, singular names, short names and categories of %d API group versions", groups.groupVersions)
	if len(failed) > 0 {
		return nil, &UnavailableError{Ref: ref, Failed: failed, Searched: searched}
	}
	return nil, &NotFoundError{Ref: ref, Searched: searched}
}

func gvkString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + "/" + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + "/" + gvk.Kind
}

// entry is one top-level resource at one version.
type entry struct {
	gvk          schema.GroupVersionKind
	resource     metav1.APIResource
	subresources []string
	preferred    bool // the group's preferred version
}

func (e *entry) mapping() Mapping {
	return Mapping{
		Group:        e.gvk.Group,
		Version:      e.gvk.Version,
		Kind:         e.gvk.Kind,
		Resource:     e.resource.Name,
		Namespaced:   e.resource.Namespaced,
		SingularName: e.resource.SingularName,
		ShortNames:   slices.Clone(e.resource.ShortNames),
		Categories:   slices.Clone(e.resource.Categories),
		Subresources: slices.Clone(e.subresources),
		Verbs:        slices.Clone([]string(e.resource.Verbs)),
	}
}

// discovered is a flat view of the discovery documents, in the server's
// priority order: groups as discovery lists them, and within a group the
// preferred version first.
type discovered struct {
	entries       []*entry
	groupVersions int
	// byGVK holds, for each kind, the first resource that serves it.
	byGVK map[schema.GroupVersionKind]*entry
	// unlisted holds the resources the RESTMapper named and the view
	// lacked even when built again (see resourceFor); guarded by
	// Mapper.mu.
	unlisted map[schema.GroupVersionResource]bool
	// failed holds the group versions the API server lists and discovery
	// could not read (an aggregated API that is down), and why.
	failed map[schema.GroupVersion]error
}

// failedFor returns the failed group versions that may hold what q asks
// for.
func (d *discovered) failedFor(q query) map[schema.GroupVersion]error {
	out := map[schema.GroupVersion]error{}
	for gv, err := range d.failed {
		if (q.group == nil || *q.group == gv.Group) && (q.version == "" || q.version == gv.Version) {
			out[gv] = err
		}
	}
	return out
}

// groups reads the (cached) discovery documents. A partial failure, such as
// an aggregated API that is down, still returns what the other groups serve,
// and the view remembers the group versions that failed: a lookup in one of
// them answers ErrUnavailable, not ErrNotFound. The view is kept like a
// complete one: the Watcher resets it when the APIService changes (becomes
// available), and without one, lookups in a failed group version reset it
// as misses do.
//
// It reads the groups and resources itself rather than through
// restmapper.GetAPIGroupResources, which drops the error that names the
// failed group versions.
func (m *Mapper) groups() (*discovered, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.view != nil {
		return m.view, nil
	}
	apiGroups, lists, err := m.discovery.ServerGroupsAndResources()
	d := &discovered{byGVK: map[schema.GroupVersionKind]*entry{}, unlisted: map[schema.GroupVersionResource]bool{}, failed: map[schema.GroupVersion]error{}}
	var partial *discovery.ErrGroupDiscoveryFailed
	switch {
	case errors.As(err, &partial):
		maps.Copy(d.failed, partial.Groups)
	case err != nil:
		return nil, fmt.Errorf("discovery: %w", err)
	}
	byGV := make(map[string]*metav1.APIResourceList, len(lists))
	for _, l := range lists {
		if l != nil {
			byGV[l.GroupVersion] = l
		}
	}
	for _, g := range apiGroups {
		if g == nil {
			continue // odd server data; never panic on it
		}
		versions := make([]string, 0, len(g.Versions))
		if pv := g.PreferredVersion.Version; pv != "" {
			versions = append(versions, pv)
		}
		for _, v := range g.Versions {
			if !slices.Contains(versions, v.Version) {
				versions = append(versions, v.Version)
			}
		}
		for _, version := range versions {
			list, ok := byGV[schema.GroupVersion{Group: g.Name, Version: version}.String()]
			if !ok {
				continue
			}
			resources := list.APIResources
			d.groupVersions++
			byName := map[string]*entry{}
			var ordered []*entry
			for _, r := range resources {
				if name, _, isSub := strings.Cut(r.Name, "/"); isSub {
					continue
				} else if r.Kind == "" || name == "" {
					continue // odd server data; never panic on it
				}
				e := &entry{
					gvk:       schema.GroupVersionKind{Group: g.Name, Version: version, Kind: r.Kind},
					resource:  r,
					preferred: version == g.PreferredVersion.Version,
				}
				// Discovery may leave these empty for the group and version of
				// the list; they are the list's own.
				e.resource.Group, e.resource.Version = g.Name, version
				byName[r.Name] = e
				ordered = append(ordered, e)
			}
			for _, r := range resources {
				if name, sub, isSub := strings.Cut(r.Name, "/"); isSub {
					if e, ok := byName[name]; ok && !slices.Contains(e.subresources, sub) {
						e.subresources = append(e.subresources, sub)
					}
				}
			}
			d.entries = append(d.entries, ordered...)
		}
	}
	for _, e := range d.entries {
		if _, ok := d.byGVK[e.gvk]; !ok {
			d.byGVK[e.gvk] = e
		}
	}
	m.view = d
	return d, nil
}

// preferred returns the entry of a group and resource at its preferred
// version, or at the first version that serves it.
func (d *discovered) preferred(gr schema.GroupResource) *entry {
	var first *entry
	for _, e := range d.entries {
		if e.gvk.Group != gr.Group || e.resource.Name != gr.Resource {
			continue
		}
		if e.preferred {
			return e
		}
		if first == nil {
			first = e
		}
	}
	return first
}

type matcher func(e *entry, name string) bool

func matchName(e *entry, name string) bool {
	return strings.EqualFold(e.gvk.Kind, name) ||
		strings.EqualFold(e.resource.Name, name) ||
		strings.EqualFold(e.resource.SingularName, name)
}

func matchShortName(e *entry, name string) bool {
	return slices.ContainsFunc(e.resource.ShortNames, func(s string) bool { return strings.EqualFold(s, name) })
}

// match returns one mapping per group and resource that the query matches:
// at the query's version if it names one, else at the preferred version.
func (d *discovered) match(q query, matches matcher) []Mapping {
	type key struct{ group, resource string }
	best := map[key]*entry{}
	var order []key
	for _, e := range d.entries {
		if q.group != nil && *q.group != e.gvk.Group {
			continue
		}
		if q.version != "" && q.version != e.gvk.Version {
			continue
		}
		if !matches(e, q.name) {
			continue
		}
		k := key{e.gvk.Group, e.resource.Name}
		prev, seen := best[k]
		if !seen {
			order = append(order, k)
		}
		if !seen || (!prev.preferred && e.preferred) {
			best[k] = e
		}
	}
	out := make([]Mapping, 0, len(order))
	for _, k := range order {
		out = append(out, best[k].mapping())
	}
	return out
}
