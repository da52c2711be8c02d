package explain

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report for a person, as kubectl describe writes an
// object: the parent, its conditions, the tree of its children with what
// kgen found of each, and its events.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	p := r.Parent
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Name:\t%s\n", p.Name)
	if p.Namespace != "" {
		fmt.Fprintf(tw, "Namespace:\t%s\n", p.Namespace)
	}
	fmt.Fprintf(tw, "Kind:\t%s (%s)\n", p.Kind, p.APIVersion)
	fmt.Fprintf(tw, "UID:\t%s\n", p.UID)
	fmt.Fprintf(tw, "Rule:\t%s\n", r.Rule)
	observed := fmt.Sprintf("kgen observed %d", p.ObservedGeneration)
	switch {
	case p.ObservedGeneration == 0:
		observed = "kgen has written no status"
	case p.ObservedBy != "":
		observed = fmt.Sprintf("observed %d, as %s wrote it", p.ObservedGeneration, p.ObservedBy)
	}
	fmt.Fprintf(tw, "Generation:\t%d (%s)\n", p.Generation, observed)
	if r.RenderError != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", r.RenderError)
	}
	_ = tw.Flush()

	b.WriteString("Conditions:")
	if len(r.Conditions) == 0 {
		b.WriteString("  <none>\n")
	} else {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tSINCE\tMESSAGE")
		for _, c := range r.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, orNone(c.Reason), timestamp(c.LastTransitionTime.Time), oneLine(c.Message))
		}
		_ = tw.Flush()
	}

	b.WriteString("Children:")
	if len(r.Children) == 0 {
		b.WriteString("  <none>\n")
	} else {
		b.WriteString("\n")
		for i, c := range r.Children {
			branch, stem := "├─ ", "│    "
			if i == len(r.Children)-1 {
				branch, stem = "└─ ", "     "
			}
			b.WriteString(branch + c.ID + ": " + c.Kind + " " + c.objectName() + "\n")
			for _, l := range c.lines() {
				fmt.Fprintf(&b, "%s%-13s%s\n", stem, l[0]+":", l[1])
			}
		}
	}

	b.WriteString("Events:")
	if len(r.Events) == 0 {
		b.WriteString("  <none>\n")
	} else {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tREASON\tCOUNT\tLAST SEEN\tMESSAGE")
		for _, e := range r.Events {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", e.Type, e.Reason, e.Count, timestamp(e.LastTimestamp), oneLine(e.Message))
		}
		_ = tw.Flush()
	}
	for _, n := range r.Notes {
		b.WriteString("Note: " + n + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// objectName is the child object's namespace/name, or why it has none.
func (c Child) objectName() string {
	switch {
	case c.Name == "":
		return "(not rendered)"
	case c.Namespace != "":
		return c.Namespace + "/" + c.Name
	}
	return c.Name
}

// lines are what the text shows of a child, as label and value.
func (c Child) lines() [][2]string {
	var out [][2]string
	add := func(label, value string) { out = append(out, [2]string{label, value}) }
	add("Exists", yesNo(c.Exists))
	if judged := c.Action != ActionWait && c.Action != ActionDelete && c.Action != ActionUnknown; c.Exists && judged {
		switch {
		case c.UpToDate:
			add("Up to date", "yes")
		case len(c.Differences) > 0:
			add("Up to date", "no: "+strings.Join(c.Differences, ", "))
		default:
			add("Up to date", "no")
		}
		if c.Ready {
			add("Ready", "yes")
		} else {
			add("Ready", "no: "+c.NotReady)
		}
		if c.ReadyWhen != "" {
			add("ReadyWhen", c.ReadyWhen)
		}
	}
	switch {
	case len(c.WaitingOn) > 0:
		add("Waits on", strings.Join(c.WaitingOn, ", "))
	case len(c.DependsOn) > 0:
		add("Depends on", strings.Join(c.DependsOn, ", "))
	}
	if c.Conflict != "" {
		add("Conflict", c.Conflict)
	}
	if c.Next != "" {
		add("Next", c.Next)
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return t.UTC().Format(time.RFC3339)
}

// oneLine keeps a table row on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
