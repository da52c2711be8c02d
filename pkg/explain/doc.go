// Package explain tells why one parent is the way it is: what kgenctl
// explain prints.
//
// Explain reads the cluster and writes nothing. It finds the parent (its
// kind in any form pkg/mapper resolves), the rule that selects it, its
// children (by the kgen.dev/parent-uid label, where the rule's placement
// says they can live), the inputs the rule reads for it, and its Events.
// It then judges each child with pkg/reconcile's own pieces, so the answer
// is the controller's: MakePlan says which children are wanted, which wait
// and which go; Differences (the walk of Matches, with the kind's schema)
// names the fields that differ from the template; CheckReady names the
// readyWhen that fails and the values it saw; Whose says whether an object
// stands where a child should be.
//
// One thing explain cannot know: the controller remembers what the API
// server made of its last write of each child, so a difference the server
// made (a normalisation the schema does not tell) is not a change to it.
// Explain, a new process, may show such a difference as one.
//
// LoadRules reads the rules kgenctl run would serve: files, and the
// cluster's Rule objects. Report.WriteText prints a report as a tree, as
// kubectl describe does; a Report marshals to the JSON of the contract.
package explain
