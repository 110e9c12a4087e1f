package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// systemsCommand is `nezha systems [-json]`: the registered systems in
// registration order, with their role (docs/architecture.md section 1); -json
// prints a JSON array of systems.SystemInfo (the conformance suite reads
// its configurations from it).
func (c *cli) systemsCommand() *ffcli.Command {
	fs := c.flagSet("systems")
	asJSON := fs.Bool("json", false, "print a JSON array of {name, role, reference, summary, conformance}")
	return c.command("systems", "usage: nezha systems [-json]: the registered systems and their roles", fs,
		func(_ context.Context, args []string) error {
			if err := noArgs("systems", args); err != nil {
				return err
			}
			infos := c.reg.Infos()
			if *asJSON {
				return writeJSON(c.stdout, infos)
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
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
		})
}
