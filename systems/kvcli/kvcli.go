// Package kvcli is `nezha kv`: one-shot Put, Get, Delete and Scan against a
// cluster, for people and scripts.
package kvcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/client"
	"github.com/nezha-harness/nezha/systems/cluster"
	"github.com/nezha-harness/nezha/systems/kvpb"
)

// ErrNotFound is returned by `kv get` for a missing key; the binary exits 1
// after printing "not found" on stderr.
var ErrNotFound = errors.New("not found")

const kvUsage = `usage: nezha kv SUBCOMMAND ARGS (-cluster DIR | -servers A,B,C) [-timeout D]
  put KEY VALUE                       write
  get KEY [-consistency stale]        print the value; a missing key prints "not found" on stderr, exit 1
  delete KEY                          delete (deleting a missing key is not an error)
  scan START [END] [-limit N]         keys in [START, END) in order, one "key<TAB>value" per line;
                                      END omitted or "" means no upper bound`

// Run is `nezha kv put K V | get K | delete K | scan START END [-limit N]`
// with -servers A,B,C or -cluster DIR. Flags may come before or after the
// positional arguments.
func Run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return systems.Usagef("kv: want a subcommand: put K V, get K, delete K, scan START [END] (nezha kv -h)")
	}
	sub, args := args[0], args[1:]
	if err := systems.SubcommandHelp(sub, stdout, kvUsage); err != nil {
		return err
	}
	fs := flag.NewFlagSet("kv "+sub, flag.ContinueOnError)
	var af cluster.AddressFlags
	af.Register(fs)
	timeout := fs.Duration("timeout", 10*time.Second, "overall deadline, retries included")
	consistency := fs.String("consistency", "linearizable", "read consistency: linearizable or stale")
	limit := fs.Int("limit", 0, "scan: at most this many keys (0: all)")
	pos, err := parseInterleaved(fs, args, stdout)
	if err != nil {
		return err
	}
	want := map[string]int{"put": 2, "get": 1, "delete": 1, "scan": 2}
	n, ok := want[sub]
	if !ok {
		return systems.Usagef("kv: unknown subcommand %q (want put, get, delete, scan)", sub)
	}
	if len(pos) != n && !(sub == "scan" && len(pos) == 1) {
		return systems.Usagef("kv %s: want %d arguments, got %d", sub, n, len(pos))
	}
	if *limit < 0 {
		return systems.Usagef("kv scan: -limit %d is negative", *limit)
	}
	if *timeout <= 0 {
		return systems.Usagef("kv: -timeout %v must be positive", *timeout)
	}
	cfg, _, err := af.ClientConfig()
	if err != nil {
		return err
	}
	switch strings.ToLower(*consistency) {
	case "linearizable":
	case "stale":
		cfg.Consistency = kvpb.ReadConsistency_STALE
	default:
		return systems.Usagef("kv: -consistency %q is not linearizable or stale", *consistency)
	}
	c, err := client.New(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	switch sub {
	case "put":
		if err := systems.CheckKey([]byte(pos[0])); err != nil {
			return systems.Usagef("kv put: %v", err)
		}
		if _, err := c.Put(ctx, []byte(pos[0]), []byte(pos[1])); err != nil {
			return fmt.Errorf("kv put: %w", err)
		}
		fmt.Fprintln(stdout, "OK")
	case "get":
		if err := systems.CheckKey([]byte(pos[0])); err != nil {
			return systems.Usagef("kv get: %v", err)
		}
		v, found, err := c.Get(ctx, []byte(pos[0]))
		if err != nil {
			return fmt.Errorf("kv get: %w", err)
		}
		if !found {
			return ErrNotFound
		}
		fmt.Fprintf(stdout, "%s\n", v)
	case "delete":
		if err := systems.CheckKey([]byte(pos[0])); err != nil {
			return systems.Usagef("kv delete: %v", err)
		}
		if _, err := c.Delete(ctx, []byte(pos[0])); err != nil {
			return fmt.Errorf("kv delete: %w", err)
		}
		fmt.Fprintln(stdout, "OK")
	case "scan":
		var end []byte
		if len(pos) == 2 {
			end = []byte(pos[1])
		}
		if len(end) > 0 && pos[0] > string(end) {
			return systems.Usagef("kv scan: START %q is after END %q", pos[0], end)
		}
		if len(pos[0]) > systems.MaxKeyBytes || len(end) > systems.MaxKeyBytes {
			return systems.Usagef("kv scan: a bound over the maximum key size of %d bytes", systems.MaxKeyBytes)
		}
		kvs, err := c.Scan(ctx, []byte(pos[0]), end, *limit)
		if err != nil {
			return fmt.Errorf("kv scan: %w", err)
		}
		for _, kv := range kvs {
			fmt.Fprintf(stdout, "%s\t%s\n", kv.Key, kv.Value)
		}
	}
	return nil
}

// parseInterleaved parses flags that may appear before, between or after
// positional arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string, w io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := systems.ParseFlags(fs, args, w); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
