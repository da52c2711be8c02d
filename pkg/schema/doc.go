// Package schema reads the OpenAPI v3 schemas the API server publishes
// (/openapi/v3) and keeps, for each kind kgen asks about, only what
// comparing and writing objects of that kind needs: which lists are keyed,
// and by which fields, which are sets, and which fields are quantities that
// the server normalises ("0.5" is stored as "500m").
//
// A schema document is large (core/v1 is several megabytes of JSON); it is
// fetched when a kind of its group version is first asked for, only the
// components that kind reaches are decoded and condensed into a small tree
// of Fields, and the document is dropped. A nil *Field means "nothing known": callers fall back to
// treating lists as atomic and values literally.
//
// For the same kinds it also keeps each kind's Type: every field with its
// JSON types, which the rules package checks templates and expressions
// against (typed expressions). Both are condensed from one read of the
// document.
//
// The package does not know what kgen does with the answers; pkg/reconcile
// uses Fields to tell a real difference from one the server made, and to
// decide how to write a parent's status, and pkg/ruleset hands Types to the
// rules package when a rule starts.
package schema
