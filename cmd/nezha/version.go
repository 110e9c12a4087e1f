package main

import (
	"context"
	"fmt"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/systems/buildinfo"
)

// versionCommand is `nezha version [-json]`: buildinfo.Info of the running
// binary, as one line or as JSON.
func (c *cli) versionCommand() *ffcli.Command {
	fs := c.flagSet("version")
	asJSON := fs.Bool("json", false, "print JSON")
	return c.command("version", "usage: nezha version [-json]: module version, VCS revision (+dirty) and Go version of this binary", fs,
		func(_ context.Context, args []string) error {
			if err := noArgs("version", args); err != nil {
				return err
			}
			in := buildinfo.Read()
			if *asJSON {
				return writeJSON(c.stdout, in)
			}
			_, err := fmt.Fprintln(c.stdout, "nezha", in.String())
			return err
		})
}
