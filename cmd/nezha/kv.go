package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// errNotFound is returned by `kv get` for a missing key; the binary exits 1
// after printing "not found" on stderr.
var errNotFound = errors.New("not found")

const kvUsage = `usage: nezha kv SUBCOMMAND ARGS (-cluster DIR | -servers A,B,C) [-timeout D]
  put KEY VALUE [-ttl D]              write; prints "OK index=N", the Raft index that applied it (etcd: the
                                      revision); with -ttl the key expires D after the leader proposes it
                                      (nezha and nezha-nogc only; other systems refuse it)
  get KEY [-consistency stale]        print the value; a missing key prints "not found" on stderr, exit 1
  delete KEY                          delete (deleting a missing key is not an error); prints "OK index=N"
  scan START [END] [-limit N]         keys in [START, END) in order, one "key<TAB>value" per line;
                                      END omitted or "" means no upper bound`

// kvCommand is `nezha kv put K V | get K | delete K | scan START END
// [-limit N]` with -servers A,B,C or -cluster DIR: one request, for people
// and scripts. Flags may come before or after the positional arguments.
func (c *cli) kvCommand() *ffcli.Command {
	return c.group("kv", kvUsage, "kv: want a subcommand: put K V, get K, delete K, scan START [END] (nezha kv -h)",
		func(sub string) error {
			return cmdline.Usagef("kv: unknown subcommand %q (want put, get, delete, scan)", sub)
		},
		c.kvSub("put", 2), c.kvSub("get", 1), c.kvSub("delete", 1), c.kvSub("scan", 2))
}

// kvSub is `nezha kv SUB` taking n positional arguments (scan: 1 or 2).
func (c *cli) kvSub(sub string, n int) *ffcli.Command {
	fs := c.flagSet("kv " + sub)
	var af cluster.Address
	registerAddress(fs, &af)
	timeout := fs.Duration("timeout", 10*time.Second, "overall deadline, retries included (a duration, e.g. 10s)")
	consistency := fs.String("consistency", "linearizable", "read consistency: linearizable or stale")
	limit := fs.Int("limit", 0, "scan: at most this many keys (0: all)")
	ttl := fs.Duration("ttl", 0, "put: time to live, e.g. 30s (0: none; nezha and nezha-nogc only)")
	return c.command(sub, kvUsage, fs, func(ctx context.Context, args []string) error {
		pos, err := c.parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != n && !(sub == "scan" && len(pos) == 1) {
			return cmdline.Usagef("kv %s: want %d arguments, got %d", sub, n, len(pos))
		}
		if *limit < 0 {
			return cmdline.Usagef("kv scan: -limit %d is negative", *limit)
		}
		if *timeout <= 0 {
			return cmdline.Usagef("kv: -timeout %v must be positive", *timeout)
		}
		if *ttl < 0 || *ttl != 0 && sub != "put" {
			return cmdline.Usagef("kv %s: -ttl %v: only a positive TTL of a put", sub, *ttl)
		}
		if *ttl != 0 {
			if err := systems.CheckTTL(*ttl); err != nil {
				return cmdline.Usagef("kv put: -ttl: %v", err)
			}
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
			return cmdline.Usagef("kv: -consistency %q is not linearizable or stale", *consistency)
		}
		kc, err := client.New(cfg)
		if err != nil {
			return err
		}
		defer kc.Close()
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return c.kvRequest(ctx, kc, sub, pos, *limit, *ttl)
	})
}

// kvRequest sends one request and prints its answer.
func (c *cli) kvRequest(ctx context.Context, kc *client.Client, sub string, pos []string, limit int, ttl time.Duration) error {
	if sub != "scan" {
		if err := systems.CheckKey([]byte(pos[0])); err != nil {
			return cmdline.Usagef("kv %s: %v", sub, err)
		}
	}
	switch sub {
	case "put":
		var (
			index uint64
			err   error
		)
		if ttl > 0 {
			index, err = kc.PutWithTTL(ctx, []byte(pos[0]), []byte(pos[1]), ttl)
		} else {
			index, err = kc.Put(ctx, []byte(pos[0]), []byte(pos[1]))
		}
		if err != nil {
			return fmt.Errorf("kv put: %w", err)
		}
		fmt.Fprintf(c.stdout, "OK index=%d\n", index)
	case "get":
		v, found, err := kc.Get(ctx, []byte(pos[0]))
		if err != nil {
			return fmt.Errorf("kv get: %w", err)
		}
		if !found {
			return errNotFound
		}
		fmt.Fprintf(c.stdout, "%s\n", v)
	case "delete":
		index, err := kc.Delete(ctx, []byte(pos[0]))
		if err != nil {
			return fmt.Errorf("kv delete: %w", err)
		}
		fmt.Fprintf(c.stdout, "OK index=%d\n", index)
	case "scan":
		var end []byte
		if len(pos) == 2 {
			end = []byte(pos[1])
		}
		if len(end) > 0 && pos[0] > string(end) {
			return cmdline.Usagef("kv scan: START %q is after END %q", pos[0], end)
		}
		if len(pos[0]) > systems.MaxKeyBytes || len(end) > systems.MaxKeyBytes {
			return cmdline.Usagef("kv scan: a bound over the maximum key size of %d bytes", systems.MaxKeyBytes)
		}
		kvs, err := kc.Scan(ctx, []byte(pos[0]), end, limit)
		if err != nil {
			return fmt.Errorf("kv scan: %w", err)
		}
		for _, kv := range kvs {
			fmt.Fprintf(c.stdout, "%s\t%s\n", kv.Key, kv.Value)
		}
	}
	return nil
}
