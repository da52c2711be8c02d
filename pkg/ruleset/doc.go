// Package ruleset keeps the set of rules a running kgen serves, and changes
// it live: the rules of its --rules files, read again when a file changes
// (a ConfigMap volume's symlink swap included), and the Rule objects of the
// cluster (rules.kgen.dev), as they are created, changed and deleted.
//
// A new version of a rule takes effect only if it is valid, alone and
// together with the other rules; otherwise the previous version keeps
// running and the error is reported: in the log for a file, and in the
// Rule's status.conditions (Accepted=False, reason Invalid, naming the field
// path and the expression) for an object. When a file rule and a Rule object
// have the same name, the file wins and the object's Ready condition says
// Shadowed.
//
// The Set hands every new set of rules to its Apply function (the
// controller's SetRules), and writes each Rule object's status:
// observedGeneration, the Accepted and Ready conditions, the counts of
// parents and ready parents, which it reads from a Progress (the controller)
// at most every StatusInterval, and the version that runs (status.running):
// a kgen that starts while a Rule object's latest version is invalid runs
// that version, so a restart does not stop the rule.
//
// CRDs reads the CustomResourceDefinitions of the rules' parent kinds, and
// the schemas the API server publishes (CRDs.Types). A rule is checked when
// it starts (Set.Admit, the controller's Admit hook): its expressions
// against its parent's CRD, or a built-in parent's published schema, and
// its children's templates against their kinds' published schemas. One
// that does not fit waits, and a Rule object says why in its Accepted
// condition; a new version that does not fit is not applied. With Manage,
// CRDs.Prepare applies the CRD of a rule with spec.parent.schema before it
// starts (kgenctl run --manage-crds).
package ruleset
