package main

import (
	"context"
	"fmt"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// versionCommand is `nezha version [-json | -imageTag]`: buildinfo.Info of
// the running binary, as one line or as JSON, or the image tag of its
// checkout.
func (c *cli) versionCommand() *ffcli.Command {
	fs := c.flagSet("version")
	asJSON := fs.Bool("json", false, "print JSON")
	imageTag := fs.Bool("imageTag", false, "print only the container image built from this binary's checkout: nezha:<12 hex digits of the revision>[-dirty], or nezha:latest without a revision (scripts/image.sh tags with it)")
	return c.command("version", "usage: nezha version [-json | -imageTag]: module version, VCS revision (+dirty) and Go version of this binary", fs,
		func(_ context.Context, args []string) error {
			if err := noArgs("version", args); err != nil {
				return err
			}
			in := buildinfo.Read()
			if *asJSON && *imageTag {
				return cmdline.Usagef("version: -json and -imageTag exclude each other")
			}
			if *imageTag {
				_, err := fmt.Fprintln(c.stdout, in.ImageTag())
				return err
			}
			if *asJSON {
				return writeJSON(c.stdout, in)
			}
			_, err := fmt.Fprintln(c.stdout, "nezha", in.String())
			return err
		})
}
