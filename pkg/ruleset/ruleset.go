package ruleset

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// RuleGVR is the resource of Rule objects.
var RuleGVR = schema.GroupVersionResource{Group: "kgen.dev", Version: "v1alpha1", Resource: "rules"}

// RuleGVK is the kind of Rule objects.
var RuleGVK = schema.GroupVersionKind{Group: "kgen.dev", Version: "v1alpha1", Kind: "Rule"}

// Defaults for Config.
const (
	// DefaultPoll is how often --rules files are read again. A file change
	// takes effect within it; reading a few small files is cheaper than
	// getting file notifications right for ConfigMap volumes, whose
	// updates are a swap of a symlink to a new directory.
	DefaultPoll = 2 * time.Second
	// StatusInterval bounds how often a Rule's parent counts are written.
	StatusInterval = 10 * time.Second
)

// Reasons of a Rule's conditions.
const (
	ConditionAccepted = "Accepted"
	ConditionReady    = "Ready"

	ReasonAccepted      = "Accepted"
	ReasonInvalid       = "Invalid"
	ReasonRunning       = "Running"
	ReasonKindNotServed = "KindNotServed"
	ReasonForbidden     = "Forbidden"
	ReasonShadowed      = "Shadowed"
	ReasonWaiting       = "Waiting"
)

// Progress tells how a rule runs; the controller is one.
type Progress interface {
	State(rule string) (controller.RuleState, bool)
}

// Resources tells whether the Rule kind is served; *mapper.Mapper is one.
type Resources interface {
	ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error)
}

// Config configures a Set.
type Config struct {
	// Paths are the --rules files and directories; none is fine when
	// Objects is set.
	Paths []string
	// Objects serves the cluster's Rule objects.
	Objects bool
	// Client reads Rule objects and writes their status; needed with
	// Objects.
	Client dynamic.Interface
	// Resources tells when the Rule kind is served; needed with Objects.
	Resources Resources
	// Options are the rules' compile options.
	Options rules.Options
	// Poll is how often files are read again; DefaultPoll when zero.
	Poll time.Duration
	// RetryInterval is how often kgen asks again whether the Rule kind is
	// served while it is not; 5 s when zero.
	RetryInterval time.Duration
	// Apply receives every new set of rules, one call at a time: from
	// FollowFiles, ReadFiles and RunObjects (and Run, which is both).
	Apply func([]*rules.Rule)
	// Progress, when set, is how the Rules' status learns whether a rule
	// runs and its parent counts.
	Progress Progress
	// WritesStatus, when set, says which Rule objects' status this Set
	// writes: with several replicas working at once (sharding), each Rule
	// has one writer. Every Rule's when nil.
	WritesStatus func(rule string) bool
	// CRDs, when set, checks rules against the schema of their parent
	// kind's CRD: a new version that does not fit is not applied, and
	// Admit keeps a rule that does not fit from starting.
	CRDs *CRDs
	// Ran, when set, returns the version of each rule that last ran, as
	// kgen's record holds it: RestoreFiles runs it in place of a file's
	// version that does not fit the schemas of its kinds.
	Ran func(ctx context.Context) (map[string]Ran, error)
}

// Ran is the version of a rule that last ran: its rules.Rule.Version and
// rules.Rule.Document.
type Ran struct {
	Version  string
	Document []byte
}

// Set is the set of rules a kgen serves. Create it with New, which reads the
// files once; Run keeps it up to date.
type Set struct {
	cfg Config
	// loaded is set once the Rule objects were all read, or are not
	// served: from then on they are candidates (see recompute).
	loaded atomic.Bool
	// handed is set once a set computed with every Rule object was
	// handed to Apply (see Loaded).
	handed atomic.Bool

	// applyMu makes recompute one at a time, from reading the rules to
	// handing the set to Apply.
	applyMu sync.Mutex
	// filesMu makes one read of the files at a time (ReadFiles).
	filesMu sync.Mutex
	mu      sync.Mutex
	// files holds, per rules file, what it held last time it was valid.
	files map[string]fileVersion
	// fileErr is the last problem of the files, if any, and its text.
	fileErr string
	// fileProblems are, per rules file, why its latest version is not
	// the one running.
	fileProblems map[string]error
	// emptied holds the --rules directories found empty once after they
	// held files (see readFiles).
	emptied map[string]bool
	objects map[string]*object
	// applied is the set last handed to Apply, by name.
	applied map[string]*rules.Rule
	// origin says, per applied rule, whether it came from a file.
	fromFile map[string]bool
	// fileTypeErrs are, per version of a rule that is not a Rule object's,
	// why it does not start (see Admit).
	fileTypeErrs map[*rules.Rule]error
	// fileWaits are those of them that do not run for it (not a running
	// version kgen checked again).
	fileWaits map[*rules.Rule]bool
	// fileConflicts are the files of the rules the last recompute left out
	// for a conflict with another rule.
	fileConflicts map[string]bool
	kick          chan struct{}
	// kindsChanged wakes watchObjects while it waits for the Rule kind.
	kindsChanged chan struct{}
}

type fileVersion struct {
	sum   [32]byte
	rules []*rules.Rule
}

// object is one Rule object and what became of its latest version.
type object struct {
	obj *unstructured.Unstructured
	// rule is its newest valid version, nil if it never had one.
	rule *rules.Rule
	// err is why its latest version is invalid, or nil.
	err error
	// conflict is why its latest version, valid in itself, does not run
	// next to the other rules (rules.CheckSet), as the last recompute
	// found; nil once it runs.
	conflict error
	// loggedConflicts are the conflicts logged while it has one: each is
	// logged once, not at every recompute while it lasts (a rejected new
	// version and the previous version after it can each have one).
	loggedConflicts map[string]bool
	// typeErr is why its running version does not start: it does not
	// fit its parent kind's schema (see Set.Admit); nil otherwise.
	typeErr error
	// written and counts are the status last written (see statusKey),
	// at writtenT: only changes are written.
	written, counts string
	writtenT        time.Time
	// failures counts the status writes the API server refused in a row;
	// no write is tried before retryAt (statusBackoff).
	failures int
	retryAt  time.Time
	// versions hold, for rule, for the version of it that runs, and for
	// recorded, the spec and generation they were read from, which the status keeps
	// (status.running) so that kgen restarted while the latest version
	// is invalid runs the one it ran before (see restore).
	versions map[*rules.Rule]version
	// restored is rule when it is the version the status recorded (see
	// restore): it ran before, so a conflict at start is blamed on the
	// other rule, as for a rule that runs.
	restored *rules.Rule
	// recorded is the version the status records as running when it is
	// not rule, the latest valid version, and none runs yet (kgen
	// started after the object changed): it runs if rule conflicts with
	// another rule, as the previous version does while kgen runs.
	recorded *rules.Rule
}

// version is a Rule object's spec at one generation.
type version struct {
	generation int64
	spec       map[string]any
}

// New reads the rules files. Invalid files are an error: kgen then stops
// before it contacts the cluster.
func New(cfg Config) (*Set, error) {
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 5 * time.Second
	}
	s := &Set{cfg: cfg, files: map[string]fileVersion{}, objects: map[string]*object{}, applied: map[string]*rules.Rule{},
		fromFile: map[string]bool{}, fileTypeErrs: map[*rules.Rule]error{}, fileWaits: map[*rules.Rule]bool{}, fileProblems: map[string]error{}, emptied: map[string]bool{}, kick: make(chan struct{}, 1),
		kindsChanged: make(chan struct{}, 1)}
	if len(cfg.Paths) == 0 {
		return s, nil
	}
	// A rules directory with no file in it holds no rules, at a start as
	// at a reread: kgen restarted after the last file was removed from
	// the ConfigMap mounted there must start, not crash.
	files, err := rules.FilesOrNone(cfg.Paths)
	if err != nil {
		return nil, err
	}
	loaded, err := rules.Load(files, cfg.Options)
	if err != nil {
		return nil, err
	}
	if cfg.CRDs != nil && cfg.CRDs.Manage {
		if errs := rules.CheckCRDs(loaded); len(errs) > 0 {
			return nil, errs
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		fv := fileVersion{sum: sha256.Sum256(data)}
		for _, r := range loaded {
			if r.Pos.File == f {
				fv.rules = append(fv.rules, r)
			}
		}
		s.files[f] = fv
	}
	for _, r := range loaded {
		s.applied[r.Name] = r
		s.fromFile[r.Name] = true
	}
	return s, nil
}

// Rules returns the current set, sorted by name.
func (s *Set) Rules() []*rules.Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sortedLocked()
}

func (s *Set) sortedLocked() []*rules.Rule {
	out := make([]*rules.Rule, 0, len(s.applied))
	for _, r := range s.applied {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Run keeps the set up to date until ctx is done: it reads the files every
// Poll, follows Rule objects when Objects is set, hands every new set to
// Apply, and writes the Rules' status. It is FollowFiles and RunObjects.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.FollowFiles(ctx) })
	wg.Go(func() { s.RunObjects(ctx) })
	wg.Wait()
}

// RunObjects follows Rule objects when Objects is set, handing every new
// set to Apply, and writes the Rules' status, until ctx is done: what the
// leader does (or, under sharding, every replica).
func (s *Set) RunObjects(ctx context.Context) {
	if !s.cfg.Objects {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.watchObjects(ctx) })
	wg.Go(func() { s.writeStatuses(ctx) })
	wg.Wait()
}

// FollowFiles reads the files every Poll and hands every new set to Apply,
// until ctx is done. It writes nothing to the cluster, so a replica that
// is not the leader follows them too: when it takes over it runs the
// rules the files hold, not those they held when it started (a live
// audit: a standby that took over applied its start's rules for a poll,
// pruning children a newer rule had added and rolling templates back).
func (s *Set) FollowFiles(ctx context.Context) {
	if len(s.cfg.Paths) == 0 {
		return
	}
	ticker := time.NewTicker(s.cfg.Poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		s.ReadFiles(ctx)
	}
}

// ReadFiles reads the files now and hands the set to Apply if anything
// changed: before the controller starts on taking over, so that it starts
// with what the files hold at that moment.
func (s *Set) ReadFiles(ctx context.Context) {
	if len(s.cfg.Paths) == 0 {
		return
	}
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	if s.readFiles(ctx) {
		s.recompute(ctx)
	}
}

// InvalidFiles returns how many rules files have a latest version that
// kgen does not run because it is invalid: it does not load (the previous
// valid version of each keeps running), or a rule of it does not fit the
// schemas of its kinds (and, at a start, no version of it ran before that
// kgen could run instead: it waits), or a rule of it conflicts with another
// rule (its previous version, if any, keeps running). The log says why.
func (s *Set) InvalidFiles() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	files := map[string]bool{}
	for f := range s.fileProblems {
		files[f] = true
	}
	for r, waits := range s.fileWaits {
		if waits && s.applied[r.Name] == r {
			files[s.fileOfLocked(r)] = true
		}
	}
	for f := range s.fileConflicts {
		files[f] = true
	}
	return len(files)
}

// fileOfLocked returns the rules file a file's rule runs from: its
// position's, or, for a version RestoreFiles compiled from kgen's record,
// the file it stands in for.
func (s *Set) fileOfLocked(r *rules.Rule) string {
	for f, fv := range s.files {
		if slices.Contains(fv.rules, r) {
			return f
		}
	}
	return r.Pos.File
}

// RestoreFiles runs, in place of a file rule that does not fit the
// schemas of its kinds and is not the version that last ran, the version
// that last ran (Config.Ran), and hands the set to Apply if it did: before
// the controller starts, as ReadFiles. A running kgen keeps the previous
// version of a file whose new version does not fit (readFiles); a kgen
// that starts with the new version has no previous one in memory, and
// without this the rule did not run at all (a live audit: a helm upgrade
// to a rule reading a field the CRD lacks, then a pod restarted, and the
// new pod's rule waited while no one repaired or recreated its children).
// A rule whose recorded version has no document (recorded by a kgen from
// before it) is left to wait. The file is read again at the next poll, and
// its own version replaces the restored one once it fits.
func (s *Set) RestoreFiles(ctx context.Context) {
	if len(s.cfg.Paths) == 0 || s.cfg.Ran == nil || s.cfg.CRDs == nil {
		return
	}
	logger := klog.FromContext(ctx)
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	s.mu.Lock()
	files := maps.Clone(s.files)
	s.mu.Unlock()
	// The record is read only for a rule that does not fit: most starts
	// make no request for it (nor need the right to).
	misfits := map[*rules.Rule]error{}
	for _, fv := range files {
		for _, r := range fv.rules {
			if err := s.checkTypes(ctx, r); err != nil {
				misfits[r] = err
			}
		}
	}
	if len(misfits) == 0 {
		return
	}
	ran, err := s.cfg.Ran(ctx)
	if err != nil {
		logger.Error(err, "Cannot read which version of each rule ran before; a file rule that does not fit the schemas of its kinds waits")
		return
	}
	restored := map[string]fileVersion{}
	problems := map[string][]error{}
	for f, fv := range files {
		var rs []*rules.Rule
		for i, r := range fv.rules {
			err, misfit := misfits[r]
			prev, ok := ran[r.Name]
			if !misfit || !ok || len(prev.Document) == 0 || prev.Version == r.Version() {
				continue // it fits, nothing to restore, or the version that ran: Admit starts it
			}
			var obj map[string]any
			// Integers as int64, as the API server's objects have them
			// (encoding/json's float64 changes one past 2^53).
			if jerr := utiljson.Unmarshal(prev.Document, &obj); jerr != nil {
				logger.Error(jerr, "Cannot read the version of a rule that ran before from kgen's record; the file's version waits", "rule", r.Name, "file", f)
				continue
			}
			old, cerr := rules.FromObject(obj, s.cfg.Options)
			if cerr == nil && (old.Name != r.Name || old.Version() != prev.Version) {
				cerr = fmt.Errorf("the record's document of rule %s compiles to rule %s, version %s, not the recorded version %s", r.Name, old.Name, old.Version(), prev.Version)
			}
			if cerr != nil {
				logger.Error(cerr, "Cannot compile the version of a rule that ran before from kgen's record; the file's version waits", "rule", r.Name, "file", f)
				continue
			}
			if rs == nil {
				rs = slices.Clone(fv.rules)
			}
			rs[i] = old
			problems[f] = append(problems[f], err)
			logger.Error(err, "Rule does not fit the schemas of its kinds; the version that ran before kgen started runs instead, from kgen's record, until the file's version fits", "rule", r.Name, "file", f, "version", prev.Version)
		}
		if rs != nil {
			// No sum: the next poll reads the file again, and takes it
			// once it fits.
			restored[f] = fileVersion{rules: rs}
		}
	}
	if len(restored) == 0 {
		return
	}
	s.mu.Lock()
	for f, fv := range restored {
		s.files[f] = fv
		s.fileProblems[f] = errors.Join(problems[f]...)
	}
	s.mu.Unlock()
	s.recompute(ctx)
}

// readFiles reads every rules file and keeps the new version of each that
// is valid. It reports whether anything changed.
func (s *Set) readFiles(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	// A directory whose last file was removed holds no rules now: they
	// stop, as a removed file's do. Only once it is empty at two reads in
	// a row: a directory emptied for a moment (rm, then cp) must not stop
	// its rules, which releases their parents.
	var files []string
	for _, p := range s.cfg.Paths {
		found, err := rules.FilesOrNone([]string{p})
		if err != nil {
			s.mu.Lock()
			s.reportFilesLocked(logger, err)
			s.mu.Unlock()
			return false
		}
		s.mu.Lock()
		held := slices.ContainsFunc(slices.Collect(maps.Keys(s.files)), func(f string) bool { return f == p || strings.HasPrefix(f, p+string(filepath.Separator)) })
		switch {
		case len(found) > 0:
			delete(s.emptied, p)
		case held && !s.emptied[p]:
			s.emptied[p] = true
			s.mu.Unlock()
			logger.Info("A rules directory has no rules files; its rules stop if it is still empty at the next read", "path", p)
			return false
		}
		s.mu.Unlock()
		files = append(files, found...)
	}
	// Read, compiled and checked without the lock: the check may read the
	// parent kinds' CRDs.
	s.mu.Lock()
	sums := map[string][32]byte{}
	running := map[string][]*rules.Rule{}
	for f, fv := range s.files {
		sums[f] = fv.sum
		running[f] = fv.rules
	}
	s.mu.Unlock()
	changes := map[string]fileVersion{}
	seen := map[string]bool{}
	var problems []error
	s.mu.Lock()
	fileProblems := maps.Clone(s.fileProblems)
	s.mu.Unlock()
	for _, f := range files {
		seen[f] = true
		data, err := os.ReadFile(f)
		if err != nil {
			problems = append(problems, err)
			fileProblems[f] = err
			continue
		}
		sum := sha256.Sum256(data)
		if old, ok := sums[f]; ok && old == sum {
			// The version running (back to it, if it was edited).
			delete(fileProblems, f)
			continue
		}
		parsed, err := rules.Parse(f, data, s.cfg.Options)
		if err == nil {
			var typeErrs []error
			for _, r := range parsed {
				typeErrs = append(typeErrs, s.checkTypes(ctx, r))
			}
			err = errors.Join(typeErrs...)
		}
		if err != nil {
			// The previous version of the file keeps running.
			problems = append(problems, err)
			fileProblems[f] = err
			continue
		}
		delete(fileProblems, f)
		// A rule of the file that did not change (another one did) is
		// kept as it runs: the controller keeps rules by identity, and
		// must neither restart it nor reconcile its parents (contract
		// section 7). So is one that only moved in the file, or whose
		// comments or layout changed (its version is the same): an edit
		// above it restarted it, reconciling every parent it has. Its
		// errors then name the lines it was read from (with its rule,
		// child, field path and expression), until it changes.
		for i, r := range parsed {
			for _, old := range running[f] {
				// Not a version RestoreFiles compiled from kgen's record,
				// whose positions are not the file's: the file's own
				// takes its place.
				if old.Name == r.Name && old.Pos.File == f && (old.SameDocument(r) || r.Version() != "" && old.Version() == r.Version()) {
					parsed[i] = old
				}
			}
		}
		changes[f] = fileVersion{sum: sum, rules: parsed}
	}
	for f := range fileProblems {
		if !seen[f] {
			delete(fileProblems, f)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for f, fv := range changes {
		s.files[f] = fv
		changed = true
		logger.Info("Rules file changed", "file", f, "rules", len(fv.rules))
	}
	for f := range s.files {
		if !seen[f] {
			delete(s.files, f)
			changed = true
			logger.Info("Rules file removed", "file", f)
		}
	}
	if !maps.EqualFunc(s.fileProblems, fileProblems, func(a, b error) bool { return a.Error() == b.Error() }) {
		s.kickLocked() // a shadowed Rule object's status names them
	}
	s.fileProblems = fileProblems
	s.reportFilesLocked(logger, errors.Join(problems...))
	return changed
}

// reportFilesLocked logs a problem of the files once, and its end.
func (s *Set) reportFilesLocked(logger klog.Logger, err error) {
	text := ""
	if err != nil {
		text = err.Error()
	}
	if text == s.fileErr {
		return
	}
	s.fileErr = text
	if err != nil {
		// A standby runs no rule: it keeps the previous versions for when
		// it takes over.
		logger.Error(err, "Rules files are invalid; the previous valid version of each is kept (and keeps running where this replica runs rules)")
	} else {
		logger.Info("Rules files are valid again")
	}
}

// watchObjects follows the Rule objects while their kind is served,
// waiting for it when it is not.
func (s *Set) watchObjects(ctx context.Context) {
	logger := klog.FromContext(ctx)
	waiting := false
	for ctx.Err() == nil {
		if _, err := s.cfg.Resources.ResourceFor(RuleGVK); err != nil {
			if !waiting {
				logger.Info("Waiting for Rule objects to be served", "reason", err.Error())
				waiting = true
			}
			// Not served: there are none to read. Discovery that fails
			// (ErrUnavailable) says nothing of that: the objects may be
			// there, and are read whole first (see recompute).
			if errors.Is(err, mapper.ErrNotFound) && !s.loaded.Swap(true) {
				s.recompute(ctx) // a file change read meanwhile
			}
			// The next try asks discovery again (the mapper does on a
			// miss), or KindsChanged says the Rule CRD may be served.
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.RetryInterval):
			case <-s.kindsChanged:
			}
			continue
		}
		waiting = false
		s.runInformer(ctx)
	}
}

// Loaded reports whether every rule has been read and handed to Apply:
// the files are read before New returns, and the Rule objects once their
// first list was handled (or at once when they are not served, or not
// asked for) and the set computed from it was handed over. Not before:
// between the two, a controller told that every rule is loaded would take
// the Rule objects' rules, which it does not have yet, for removed ones
// (and forget their recorded versions).
func (s *Set) Loaded() bool { return !s.cfg.Objects || s.handed.Load() }

// objectsRead reports whether every Rule object has been read (see
// loaded).
func (s *Set) objectsRead() bool { return !s.cfg.Objects || s.loaded.Load() }

// Settled reports whether every rule is loaded (see Loaded) and every Rule
// object has a version that runs or waits to (or a rules file's rule of
// its name runs). A Rule object with no valid version (kgen started while
// it was invalid and its status records no version, or an upgraded kgen
// checks more), or one that ran before whose valid version does not run
// (it conflicts with another rule), may select parents that carry kgen's
// finalizer from an earlier run: until it is fixed or deleted, nothing may
// be released as selected by no rule. Its status and the log say why.
func (s *Set) Settled() bool {
	if !s.Loaded() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, o := range s.objects {
		if o.rule == nil && o.err != nil {
			return false
		}
		if o.rule != nil && s.applied[name] == nil && !s.fromFile[name] && ranBefore(o) {
			// A valid version that does not run (it conflicts with
			// another rule), of a Rule that ran before: its parents,
			// which may carry kgen's finalizer, have not left it. (One
			// that never ran holds no parent: a new Rule that overlaps
			// another must not stop every sweep.)
			return false
		}
	}
	return true
}

// ranBefore tells whether a Rule object ran before, as far as its status
// records: a version was restored from it, or it records one.
func ranBefore(o *object) bool {
	if o.restored != nil {
		return true
	}
	_, found, _ := unstructured.NestedMap(o.obj.Object, "status", "running")
	return found
}

// runsRecorded tells whether a Rule object's status records its latest
// version as the one kgen runs (status.running at its generation).
func runsRecorded(o *object) bool {
	gen, found, _ := unstructured.NestedInt64(o.obj.Object, "status", "running", "generation")
	return found && gen == o.obj.GetGeneration()
}

// KindsChanged is told that the kinds of an API group may have changed
// (see mapper.Watcher): Set looks for the Rule kind again at once if it
// waits for it.
func (s *Set) KindsChanged(ch mapper.Change) {
	if !ch.All && ch.Group != RuleGVK.Group {
		return
	}
	select {
	case s.kindsChanged <- struct{}{}:
	default:
	}
}

// runInformer runs an informer of Rule objects until ctx is done or the
// kind stops being served.
func (s *Set) runInformer(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(s.cfg.Client, 0)
	informer := factory.ForResource(RuleGVR).Informer()
	_ = informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if apierrors.IsNotFound(err) {
			cancel() // the CRD went away: wait for it again
		}
	})
	handle := func(obj any, deleted bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		if s.observe(ctx, u, deleted) {
			s.recompute(ctx)
		}
	}
	reg, _ := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { handle(obj, false) },
		UpdateFunc: func(_, obj any) { handle(obj, false) },
		DeleteFunc: func(obj any) { handle(obj, true) },
	})
	if reg != nil {
		go func() {
			// The handler has seen every object of the first list.
			if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
				s.loaded.Store(true)
				s.recompute(ctx) // the first set with every Rule object
			}
		}()
	}
	klog.FromContext(ctx).Info("Serving Rule objects")
	informer.RunWithContext(ctx)
}

// observe records a Rule object's new state and reports whether the rules
// may have changed.
func (s *Set) observe(ctx context.Context, u *unstructured.Unstructured, deleted bool) bool {
	name := u.GetName()
	s.mu.Lock()
	o := s.objects[name]
	same := o != nil && o.obj.GetGeneration() == u.GetGeneration() && o.obj.GetUID() == u.GetUID()
	known := o != nil && o.rule != nil && o.obj.GetUID() == u.GetUID()
	runs := s.applied[name] != nil
	s.mu.Unlock()
	var rule, restored *rules.Rule
	var ran version
	var err error
	if !deleted && !same {
		// Compiled and checked without the lock: the check may read the
		// parent kind's CRD.
		if rule, err = rules.FromObject(u.Object, s.cfg.Options); err == nil {
			err = s.checkTypes(ctx, rule)
			if err != nil && !known && runsRecorded(&object{obj: u}) {
				// The version that ran before kgen started, and no longer
				// fits a CRD that changed meanwhile: it runs, and Admit
				// reports it, as for a running rule (see Admit).
				err = nil
			}
		}
		if err != nil && !known {
			restored, ran = s.restore(ctx, u)
		} else if err == nil && !known && !runs && !runsRecorded(&object{obj: u}) {
			// The recorded version, if any, is the fallback should the
			// latest conflict with another rule.
			restored, ran = s.restore(ctx, u)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o = s.objects[name]
	if deleted {
		if o == nil {
			return false
		}
		delete(s.objects, name)
		klog.FromContext(ctx).Info("Rule object deleted", "rule", name)
		return true
	}
	if same {
		o.obj = u // a status write or a metadata change: the rule is the same
		return false
	}
	if o == nil || o.obj.GetUID() != u.GetUID() {
		o = &object{versions: map[*rules.Rule]version{}}
		s.objects[name] = o
	}
	o.obj = u
	o.typeErr = nil
	if err != nil {
		o.err = describe(err, u)
		if restored != nil && o.rule == nil {
			o.rule, o.restored, o.versions[restored] = restored, restored, ran
			klog.FromContext(ctx).Error(o.err, "Rule object is invalid; the version kgen ran before, recorded in its status, runs", "rule", name, "ranGeneration", ran.generation)
			return true
		}
		klog.FromContext(ctx).Error(o.err, "Rule object is invalid; its previous version, if any, keeps running", "rule", name)
		s.kickLocked()
		return false
	}
	o.rule, o.restored, o.err = rule, nil, nil
	if restored != nil {
		o.recorded, o.versions[restored] = restored, ran
	} else if known {
		o.recorded = nil // a new version while kgen runs: the one that runs is the fallback
	}
	spec, _ := u.Object["spec"].(map[string]any)
	o.versions[rule] = version{generation: u.GetGeneration(), spec: runtime.DeepCopyJSON(spec)}
	klog.FromContext(ctx).Info("Rule object changed", "rule", name, "generation", u.GetGeneration())
	return true
}

// Running returns the version of a Rule object that kgen runs, as its
// status records it (status.running), as a Rule object of its own (the
// object's apiVersion, kind and metadata with the recorded spec), and its
// generation; found is false if the status records none.
func Running(u *unstructured.Unstructured) (doc map[string]any, generation int64, found bool) {
	spec, found, _ := unstructured.NestedMap(u.Object, "status", "running", "spec")
	if !found {
		return nil, 0, false
	}
	generation, _, _ = unstructured.NestedInt64(u.Object, "status", "running", "generation")
	return map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": u.Object["metadata"], "spec": spec}, generation, true
}

// restore returns the version of a Rule object that a kgen ran before, as
// its status records it (status.running), compiled as the object's latest
// version is; nil if there is none, or it does not compile. It is not
// checked against its kinds' schemas: it ran, and Admit reports a CRD that
// changed under it since, as for a running rule.
// It is what runs when kgen starts while the object's latest version is
// invalid: the contract keeps the previous valid version running, and a
// restart must not drop it (its parents would not be repaired, and a
// deleted one would stay Terminating on kgen's finalizer).
func (s *Set) restore(ctx context.Context, u *unstructured.Unstructured) (*rules.Rule, version) {
	doc, gen, found := Running(u)
	if !found {
		return nil, version{}
	}
	spec, _ := doc["spec"].(map[string]any)
	rule, err := rules.FromObject(doc, s.cfg.Options)
	if err != nil {
		klog.FromContext(ctx).Error(err, "The version of the Rule object that kgen ran before, recorded in its status, is not valid either", "rule", u.GetName(), "ranGeneration", gen)
		return nil, version{}
	}
	return rule, version{generation: gen, spec: spec}
}

// checkTypes checks a new version of a rule against its parent kind's CRD
// when it is served: only a rule that does not fit is an error. Any other
// problem is left to the check when the rule starts (Admit).
func (s *Set) checkTypes(ctx context.Context, rule *rules.Rule) error {
	if s.cfg.CRDs == nil {
		return nil
	}
	err := s.cfg.CRDs.Check(ctx, rule)
	var te *TypeError
	if errors.As(err, &te) {
		return err
	}
	return nil
}

// Admit checks a rule against the schema of its parent kind's CRD before
// it starts; it fits controller.Config.Admit. A rule that does not fit does
// not start: the error is logged, once, and a Rule object's status says
// Accepted False, reason Invalid, with the field path in the Rule and the
// expression. It is asked again at every try to start the rule, so a fixed
// CRD or rule lets it start.
//
// A version of a rule that ran before starts all the same, reported as
// Recheck reports it: one of its CRDs changed while kgen was stopped, or
// while its kind was not served, and had kgen run through the change the
// rule would have kept running. Not starting it left its parents
// unreconciled, their Ready condition as it was before the change (a live
// audit). A Rule object ran before when its status records the version as
// the one that runs; any rule, a file's too, when ranBefore says so (the
// controller's record holds the version as the one that last started). A
// version that never ran (a rule edited into a typo while kgen was
// stopped) does not start.
func (s *Set) Admit(ctx context.Context, rule *rules.Rule, ranBefore bool) error {
	ran := ranBefore || s.ranBefore(rule)
	err := s.check(ctx, rule, ran)
	if te := (*TypeError)(nil); ran && errors.As(err, &te) {
		return nil // reported; it runs
	}
	return err
}

// ranBefore tells whether this version of a Rule object ran before kgen
// (or the rule) started: see Admit.
func (s *Set) ranBefore(rule *rules.Rule) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[rule.Name]
	if o == nil || s.fromFile[rule.Name] {
		return false
	}
	return o.recorded == rule || o.restored == rule || o.rule == rule && runsRecorded(o)
}

// Recheck checks a running rule again against the schemas of its kinds,
// after a CRD of one of them changed; it fits controller.Config.Recheck.
// A rule that no longer fits keeps running (stopping it would stop the
// drift repair and finalizing of every parent, also of those whose objects
// still render; each parent says where its render fails), but is reported
// as Admit reports it: logged once, and a Rule object's status says
// Accepted False, reason Invalid, naming the field path and the
// expression. When the CRD or the rule is fixed, Accepted is True again.
func (s *Set) Recheck(ctx context.Context, rule *rules.Rule) {
	_ = s.check(ctx, rule, true)
}

// check is Admit, and with running Recheck.
func (s *Set) check(ctx context.Context, rule *rules.Rule, running bool) error {
	if s.cfg.CRDs == nil {
		return nil
	}
	err := s.cfg.CRDs.Check(ctx, rule)
	var te *TypeError
	isTypeErr := errors.As(err, &te)
	s.mu.Lock()
	defer s.mu.Unlock()
	var prev error
	var o *object
	if c := s.objects[rule.Name]; c != nil && c.rule == rule {
		o, prev = c, c.typeErr
	} else {
		prev = s.fileTypeErrs[rule]
	}
	if running && !isTypeErr && err != nil {
		return err // the CRD could not be read: what is known stands
	}
	var now error
	if isTypeErr {
		now = err
		if o != nil {
			// The field path in the Rule, rather than a line of the YAML
			// kgen made of it.
			now = &TypeError{CRD: te.CRD, Err: describe(te.Err, o.obj)}
		}
		if running {
			now = &TypeError{CRD: te.CRD, Err: fmt.Errorf("%w (the rule keeps running; each parent whose render fails says so on its Ready condition)", now.(*TypeError).Err)}
		}
	}
	if o != nil {
		o.typeErr = now
	} else if now != nil {
		s.fileTypeErrs[rule] = now
		s.fileWaits[rule] = !running
	} else {
		delete(s.fileTypeErrs, rule)
		delete(s.fileWaits, rule)
	}
	switch {
	case now != nil && (prev == nil || prev.Error() != now.Error()):
		msg := "Rule does not start: it does not fit the schemas of its kinds"
		if running {
			msg = "Rule no longer fits the schemas of its kinds, one of which changed; it keeps running"
		}
		klog.FromContext(ctx).Error(now, msg, "rule", rule.Name)
		s.kickLocked()
	case now == nil && prev != nil:
		if running {
			klog.FromContext(ctx).Info("Rule fits the schemas of its kinds again", "rule", rule.Name)
		}
		s.kickLocked()
	}
	if isTypeErr {
		return now
	}
	return err
}

// describe rewrites a rule's errors with the field path in the object
// instead of a line of its YAML, which the user never wrote.
func describe(err error, u *unstructured.Unstructured) error {
	var list rules.ErrorList
	if !errors.As(err, &list) {
		return err
	}
	children, _, _ := unstructured.NestedSlice(u.Object, "spec", "children")
	msgs := make([]string, 0, len(list))
	for _, e := range list {
		msg := ""
		if p := rules.FieldPath(e, children); p != "" {
			msg = p + ": "
		}
		if e.Expression != "" {
			msg += "${" + e.Expression + "}: "
		}
		msg += e.Err.Error()
		msgs = append(msgs, msg)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// recompute builds the set from the files and the objects, checks it as a
// whole, and hands it to Apply if it changed. A rule whose new version
// conflicts with the others keeps its previous version. Until every Rule
// object of the first list is observed (Loaded), only the files' rules
// are candidates: with some of the objects, a Rule that conflicts with
// one not seen yet would run, and prune what the other made (an audit saw
// that at a restart); a file's change still lands while the Rule objects
// cannot be listed.
func (s *Set) recompute(ctx context.Context) {
	// One at a time, up to Apply: sets are handed over in the order they
	// were computed, so the controller runs the last one.
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.Lock()
	full := s.objectsRead()
	candidates, fromFile := s.candidatesLocked(full)
	for _, o := range s.objects {
		o.conflict = nil // found again below while it lasts
	}
	s.fileConflicts = nil // found again below while they last
	// A conflict is blamed on the later rule of a pair, so the rules come
	// in three tiers: the versions that run (at start: that a Rule
	// object's status records as running), then new versions of rules
	// that run or ran before, then rules that never ran. A new version
	// that conflicts with a running one then does not run, and a rule
	// that never ran, rejected for a conflict, is rejected again after a
	// restart and never blocks a new version of the rule that runs.
	tier := func(r *rules.Rule) int {
		o := s.objects[r.Name]
		if o != nil && fromFile[r.Name] {
			o = nil // a file's rule: only what Apply was handed counts
		}
		switch {
		case s.applied[r.Name] == r || o != nil && (o.restored == r || o.recorded == r || o.rule == r && runsRecorded(o)):
			return 0
		case s.applied[r.Name] != nil || o != nil && ranBefore(o):
			return 1
		}
		return 2
	}
	order := func(a, b *rules.Rule) int {
		if ta, tb := tier(a), tier(b); ta != tb {
			return ta - tb
		}
		return strings.Compare(a.Name, b.Name)
	}
	slices.SortStableFunc(candidates, order)
	for {
		errs := rules.CheckSet(candidates)
		if s.cfg.CRDs != nil && s.cfg.CRDs.Manage {
			errs = append(errs, rules.CheckCRDs(candidates)...)
		}
		if len(errs) == 0 {
			break
		}
		bad := errs[0].Rule
		i := slices.IndexFunc(candidates, func(r *rules.Rule) bool { return r.Name == bad })
		if i < 0 {
			break
		}
		rejected := candidates[i]
		candidates = slices.Delete(candidates, i, i+1)
		// Its version that runs (or, at start, ran before kgen stopped)
		// takes its place, in its tier: it still yields to a rule of the
		// first tier that comes before it, as it did when it ran.
		var instead *rules.Rule
		if prev := s.applied[bad]; prev != nil && prev != rejected {
			instead = prev
		} else if o := s.objects[bad]; prev == nil && o != nil && !fromFile[bad] && o.recorded != nil && o.recorded != rejected {
			instead = o.recorded
		}
		if o := s.objects[bad]; o != nil && !fromFile[bad] {
			o.conflict = errors.New(strings.TrimPrefix(errs[0].Error(), errs[0].Pos.String()+": "))
			// Its status says so too; the log says it once.
			if msg := o.conflict.Error(); !o.loggedConflicts[msg] {
				if o.loggedConflicts == nil {
					o.loggedConflicts = map[string]bool{}
				}
				o.loggedConflicts[msg] = true
				if instead != nil {
					klog.FromContext(ctx).Error(o.conflict, "Rule object conflicts with another rule; its previous version keeps running", "rule", bad)
				} else {
					klog.FromContext(ctx).Error(o.conflict, "Rule object conflicts with another rule; it does not run", "rule", bad)
				}
			}
		} else {
			if s.fileConflicts == nil {
				s.fileConflicts = map[string]bool{}
			}
			s.fileConflicts[s.fileOfLocked(rejected)] = true
			if instead != nil {
				klog.FromContext(ctx).Error(errs[0], "Rule conflicts with another; its previous version keeps running", "rule", bad)
			} else {
				klog.FromContext(ctx).Error(errs[0], "Rule conflicts with another; it does not run", "rule", bad)
			}
		}
		if instead != nil {
			i, _ := slices.BinarySearchFunc(candidates, instead, order)
			candidates = slices.Insert(candidates, i, instead)
		}
	}
	next := map[string]*rules.Rule{}
	for _, r := range candidates {
		next[r.Name] = r
	}
	same := len(next) == len(s.applied)
	for name, r := range next {
		if s.applied[name] != r {
			same = false
		}
	}
	s.applied, s.fromFile = next, fromFile
	for name, o := range s.objects {
		if o.conflict == nil {
			o.loggedConflicts = nil // logged again if it comes back
		}
		for r := range o.versions {
			if r != o.rule && r != next[name] && r != o.recorded {
				delete(o.versions, r)
			}
		}
		if next[name] != nil && next[name] != o.recorded {
			o.recorded = nil // another version runs now
		}
	}
	for r := range s.fileTypeErrs {
		if next[r.Name] != r {
			delete(s.fileTypeErrs, r)
			delete(s.fileWaits, r)
		}
	}
	set := s.sortedLocked()
	s.kickLocked()
	s.mu.Unlock()
	if !same && s.cfg.Apply != nil {
		s.cfg.Apply(set)
	}
	if full {
		s.handed.Store(true)
	}
}

// candidatesLocked returns every rule that may run: the valid versions of
// the files' rules, and of the objects a file does not shadow.
// Until every Rule object of the first list is observed (objects false),
// only the files' rules are candidates: a Rule seen before one it
// conflicts with would run, and prune what the other made.
func (s *Set) candidatesLocked(objects bool) ([]*rules.Rule, map[string]bool) {
	var out []*rules.Rule
	fromFile := map[string]bool{}
	paths := make([]string, 0, len(s.files))
	for f := range s.files {
		paths = append(paths, f)
	}
	sort.Strings(paths)
	for _, f := range paths {
		for _, r := range s.files[f].rules {
			out = append(out, r)
			fromFile[r.Name] = true
		}
	}
	names := make([]string, 0, len(s.objects))
	for n := range s.objects {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if o := s.objects[n]; objects && o.rule != nil && !fromFile[n] {
			out = append(out, o.rule)
		}
	}
	return out, fromFile
}

func (s *Set) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// writeStatuses writes the Rules' status when it changes, and their parent
// counts at most every StatusInterval.
func (s *Set) writeStatuses(ctx context.Context) {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-s.kick:
		}
		s.writeAll(ctx)
	}
}

func (s *Set) writeAll(ctx context.Context) {
	type pending struct {
		o      *object
		status map[string]any
		key    string
	}
	if !s.Loaded() {
		// Until the set with every Rule object was handed over, a Rule
		// seen is not running yet here, whatever it does: its status
		// stands (a live check: every start wrote Ready False "no valid
		// version of the rule runs" for a second).
		return
	}
	var todo []pending
	now := time.Now()
	// Not between a recompute and its hand-over: s.applied would be ahead
	// of what the controller reports (a review: an edited version's
	// status was written, as running, before the controller had it).
	s.applyMu.Lock()
	s.mu.Lock()
	for name, o := range s.objects {
		if s.cfg.WritesStatus != nil && !s.cfg.WritesStatus(name) {
			o.written = "" // another replica writes it; if it comes back here, write it then
			continue
		}
		if now.Before(o.retryAt) {
			continue
		}
		if s.cfg.Progress != nil {
			if st, _ := s.cfg.Progress.State(name); notTried(st) || st.Next != nil && notTried(*st.Next) {
				// This replica has not tried to start the rule, or its
				// new version, yet: what the status says stands until
				// it has (a live audit: a shard restarted with its id
				// wrote Ready False "not started" while the others ran
				// the rule; a live check: every edit of a Rule flipped
				// its Ready to False for a second).
				continue
			}
		}
		status := s.statusLocked(name, o)
		key, counts := statusKey(status)
		if key == o.written && (counts == o.counts || now.Sub(o.writtenT) < StatusInterval) {
			// Unchanged, or only the parent counts changed and they were
			// written less than StatusInterval ago.
			continue
		}
		o.keepTimes(status["conditions"].([]any))
		todo = append(todo, pending{o: o, status: status, key: key})
	}
	s.mu.Unlock()
	s.applyMu.Unlock()
	for _, p := range todo {
		obj := &unstructured.Unstructured{Object: map[string]any{"status": p.status}}
		obj.SetGroupVersionKind(RuleGVK)
		obj.SetName(p.o.obj.GetName())
		obj.SetUID(p.o.obj.GetUID())
		if _, err := s.cfg.Client.Resource(RuleGVR).ApplyStatus(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "kgen", Force: true}); err != nil {
			s.mu.Lock()
			p.o.failures++
			wait := statusBackoff(p.o.failures)
			p.o.retryAt = time.Now().Add(wait) // from the failure: a write may have waited long for its answer
			s.mu.Unlock()
			if !apierrors.IsNotFound(err) { // deleted meanwhile: nothing to report
				klog.FromContext(ctx).Error(err, "Cannot write a Rule's status; retrying with backoff", "rule", obj.GetName(), "retryIn", wait)
			}
			continue
		}
		_, counts := statusKey(p.status)
		s.mu.Lock()
		p.o.written, p.o.counts, p.o.writtenT = p.key, counts, now
		p.o.failures, p.o.retryAt = 0, time.Time{}
		s.mu.Unlock()
	}
}

// statusBackoff is how long to wait after the failures-th refused status
// write of a Rule in a row: 1 s, doubling up to 5 minutes, as kgen backs
// off a parent's failures, so that a revoked grant or an API server that
// is down costs one attempt and one log line per step, not one a second.
func statusBackoff(failures int) time.Duration {
	const base, limit = time.Second, 5 * time.Minute
	if failures > 9 {
		return limit
	}
	return min(base<<(failures-1), limit)
}

// statusKey returns what a status says apart from its parent counts (and
// its conditions' times, which keepTimes sets), and the counts.
func statusKey(status map[string]any) (key, counts string) {
	rest := map[string]any{}
	for k, v := range status {
		if k != "parents" && k != "readyParents" {
			rest[k] = v
		}
	}
	b, _ := json.Marshal(rest)
	return string(b), fmt.Sprint(status["parents"], "/", status["readyParents"])
}

// statusLocked computes a Rule object's status.
func (s *Set) statusLocked(name string, o *object) map[string]any {
	gen := o.obj.GetGeneration()
	accepted := condition(ConditionAccepted, true, ReasonAccepted, "the rule is valid", gen)
	switch {
	case o.err != nil:
		accepted = condition(ConditionAccepted, false, ReasonInvalid, o.err.Error(), gen)
	case o.conflict != nil:
		accepted = condition(ConditionAccepted, false, ReasonInvalid, o.conflict.Error(), gen)
	}
	var ready map[string]any
	var parents, readyParents int
	// The version that runs, as the status records it: kept as the
	// object's status has it unless the version handed to the controller
	// runs, with no newer one pending (below). A forced apply of a status
	// without it would erase it, and a restart would have nothing to run.
	ran, _, _ := unstructured.NestedMap(o.obj.Object, "status", "running")
	running := s.applied[name]
	if o.err == nil && o.conflict == nil && o.typeErr != nil && running == o.rule && !s.fromFile[name] {
		accepted = condition(ConditionAccepted, false, ReasonInvalid, o.typeErr.Error(), gen)
	}
	switch {
	case s.fromFile[name]:
		msg := "a rule of kgen's --rules files has the name " + name + "; the file's rule runs"
		if r := s.applied[name]; r != nil && s.fileProblems[s.fileOfLocked(r)] != nil {
			f := s.fileOfLocked(r)
			msg += " (its previous valid version: the latest version of " + f + " is invalid: " + s.fileProblems[f].Error() + ")"
		}
		ready = condition(ConditionReady, false, ReasonShadowed, msg, gen)
	case running == nil:
		ready = condition(ConditionReady, false, ReasonInvalid, "no valid version of the rule runs", gen)
	default:
		var st controller.RuleState
		if s.cfg.Progress != nil {
			st, _ = s.cfg.Progress.State(name)
		}
		parents, readyParents = st.Parents, st.ReadyParents
		if v, ok := o.versions[running]; ok && st.Running && st.Next == nil {
			ran = map[string]any{"generation": v.generation, "spec": v.spec}
		}
		msg := "the rule runs"
		if o.err != nil || o.conflict != nil || running != o.rule {
			if v, ok := o.versions[running]; ok {
				msg += fmt.Sprintf(" (its previous valid version, of generation %d: the latest is not accepted)", v.generation)
			} else {
				msg += " (its previous valid version: the latest is not accepted)"
			}
		}
		var gone []string
		for _, u := range slices.Concat(st.Unsynced, st.Stale) {
			if ns := u.Resource.Namespace; u.NamespaceGone != "" && !slices.Contains(gone, ns) {
				gone = append(gone, ns)
				msg += fmt.Sprintf(", but not in namespace %s, which %s (%s: %v)", ns, u.NamespaceGone, u.Resource, u.Err)
				if u.NamespaceGone == "is being deleted" {
					// kgen cannot find them there to release them.
					msg += "; parents there that hold kgen's finalizer " + reconcile.Finalizer + " keep it until kgen may list them again, or someone removes it"
				}
			}
		}
		if st.RecordError != "" {
			msg += "; kgen cannot use its record of child kinds, so children of a kind that leaves the rule while kgen is stopped may not be pruned: " + st.RecordError
		}
		reason, why := NotReady(st)
		switch {
		case st.Next != nil:
			// A new version that cannot run yet, or whose caches are
			// syncing; the previous one runs meanwhile.
			reason, why = NotReady(*st.Next)
			if reason == "" {
				reason, why = ReasonWaiting, "its caches are syncing"
			}
			ready = condition(ConditionReady, false, reason, "its new version does not run yet: "+why+"; its previous version keeps running", gen)
		case reason != "":
			ready = condition(ConditionReady, false, reason, why, gen)
		case len(st.Shards) > 0:
			// It runs here, but not on every replica: the parents of
			// the others wait. The reason is the gravest of theirs.
			var on []string
			reason := ""
			for _, sh := range st.Shards {
				why := sh.Message
				if why == "" {
					why = "its log says why" // cut to fit its Lease
				}
				on = append(on, fmt.Sprintf("on shard %s (%s): %s", sh.Shard, sh.Reason, why))
				if reason == "" || Gravity(sh.Reason) > Gravity(reason) {
					reason = sh.Reason
				}
			}
			msg := "the rule does not run on every replica, and the parents of those it does not run on wait: " + strings.Join(on, "; ")
			if st.RecordError != "" {
				msg += "; and here kgen cannot use its record of child kinds: " + st.RecordError
			}
			ready = condition(ConditionReady, false, reason, msg, gen)
		default:
			ready = condition(ConditionReady, true, ReasonRunning, msg, gen)
		}
	}
	status := map[string]any{"observedGeneration": gen, "conditions": []any{accepted, ready},
		"parents": int64(parents), "readyParents": int64(readyParents)}
	if ran != nil {
		status["running"] = ran
	}
	return status
}

// notTried tells whether a replica has not tried to start a version of a
// rule yet (see controller.NotStarted).
func notTried(st controller.RuleState) bool {
	return !st.Running && st.Waiting == controller.NotStarted
}

// Gravity orders the reasons a replica gives for not running a rule:
// the one that needs a person's grant first.
func Gravity(reason string) int {
	switch reason {
	case ReasonForbidden:
		return 3
	case ReasonKindNotServed:
		return 2
	case ReasonWaiting:
		return 1
	}
	return 0
}

// NotReady returns the reason and message of a Ready condition False for
// a version of a rule that does not run, or whose caches have not synced,
// on this replica; "" when it runs. State.Shards is not looked at.
func NotReady(st controller.RuleState) (reason, msg string) {
	var failing, unsynced []string
	for _, u := range st.Unsynced {
		if u.Failing() {
			failing = append(failing, u.String())
		}
		unsynced = append(unsynced, u.Resource.String())
	}
	var stale []string
	for _, u := range st.Stale {
		if u.Failing() {
			stale = append(stale, u.String())
		}
	}
	reason = ReasonWaiting
	if st.Forbidden {
		reason = ReasonForbidden
	}
	switch {
	case len(failing) > 0:
		return reason, "caches not synced, as lists or watches fail: " + strings.Join(failing, "; ")
	case len(stale) > 0:
		// It runs, on caches that miss every change since: a new or
		// changed parent, a child deleted by hand.
		return reason, "lists or watches fail, so kgen does not see changes of these objects until they list again (it retries with backoff): " + strings.Join(stale, "; ")
	case !st.Running && st.Waiting != "":
		reason := ReasonWaiting
		if st.KindNotServed {
			reason = ReasonKindNotServed
		}
		return reason, st.Waiting
	case !st.Synced && len(unsynced) > 0:
		return ReasonWaiting, "its caches are syncing: waiting for " + strings.Join(unsynced, ", ")
	case !st.Synced:
		return ReasonWaiting, "its caches are syncing"
	}
	return "", ""
}

func condition(typ string, ok bool, reason, msg string, gen int64) map[string]any {
	status := "False"
	if ok {
		status = "True"
	}
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "observedGeneration": gen}
}

// keepTimes sets each condition's lastTransitionTime: the one the object
// has if its status is unchanged, else now.
func (o *object) keepTimes(conds []any) {
	have, _, _ := unstructured.NestedSlice(o.obj.Object, "status", "conditions")
	for _, c := range conds {
		c := c.(map[string]any)
		c["lastTransitionTime"] = metav1.Now().UTC().Format(time.RFC3339)
		for _, h := range have {
			if hm, ok := h.(map[string]any); ok && hm["type"] == c["type"] && hm["status"] == c["status"] {
				if t, ok := hm["lastTransitionTime"].(string); ok {
					c["lastTransitionTime"] = t
				}
			}
		}
	}
}

// Describe says where the rules come from, for logs.
func (s *Set) Describe() string {
	parts := []string{}
	if len(s.cfg.Paths) > 0 {
		parts = append(parts, fmt.Sprintf("files %s", strings.Join(s.cfg.Paths, ", ")))
	}
	if s.cfg.Objects {
		parts = append(parts, "Rule objects")
	}
	return strings.Join(parts, " and ")
}
