package systems

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
)

// SystemInfo is one row of `nezha systems -json`: a registered system's
// name, role, summary and conformance configurations.
type SystemInfo struct {
	Name        string        `json:"name"`
	Role        Role          `json:"role"`
	Reference   bool          `json:"reference,omitempty"`
	Optional    bool          `json:"optional,omitempty"`
	Summary     string        `json:"summary"`
	Conformance []Conformance `json:"conformance"`
}

// SystemsCommand is `nezha systems [-json]`: the registered systems in
// registration order, with their role (ARCHITECTURE.md section 1); -json
// prints a JSON array of SystemInfo (the conformance suite reads its
// configurations from it). Errors from bad flags are *UsageError.
func SystemsCommand(args []string, reg *Registry, stdout io.Writer) error {
	fs := flag.NewFlagSet("systems", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array of {name, role, reference, summary, conformance}")
	if err := ParseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("systems: unexpected argument %q", fs.Arg(0))
	}
	var infos []SystemInfo
	for _, s := range reg.Systems() {
		infos = append(infos, SystemInfo{Name: s.Name, Role: s.Role, Reference: s.Reference, Optional: s.Optional, Summary: s.Summary, Conformance: s.Conformances()})
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(infos)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tSUMMARY")
	for _, in := range infos {
		role := string(in.Role)
		if in.Reference {
			role += " (reference)"
		}
		if in.Optional {
			role += " (optional)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", in.Name, role, in.Summary)
	}
	return tw.Flush()
}
