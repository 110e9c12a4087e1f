// Command nezha is the one binary of the harness: it runs nodes, local
// clusters, clients, workloads, checks, experiments and plots. See
// `nezha help` and ARCHITECTURE.md section 6.1.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nezha-harness/nezha/baseline"
	"github.com/nezha-harness/nezha/dwisckey"
	"github.com/nezha-harness/nezha/experiments"
	"github.com/nezha-harness/nezha/linearizability"
	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/buildinfo"
	"github.com/nezha-harness/nezha/systems/cluster"
	"github.com/nezha-harness/nezha/systems/kvcli"
	"github.com/nezha-harness/nezha/systems/node"
	"github.com/nezha-harness/nezha/workloads"
	"github.com/nezha-harness/nezha/ycsb"
)

const usage = `usage: nezha <command> [flags]

commands:
  serve     run one node: serve -system S -address A -internalAddress I -peers P1,P2,P3 -data D
  cluster   local clusters: cluster up|status|kill|restart|down -cluster DIR
  kv        one request: kv put K V | get K | delete K | scan START END [-limit N]
  check     linearizability under faults: check -system S [-nemesis LIST] [-duration D] [-read-mode M]
  bench     the paper's workloads: bench put|get|scan [-cnums N -dnums N -vsize BYTES] -servers ...|-cluster DIR
  ycsb      YCSB core workloads: ycsb load|run -P FILE [-p name=value ...] -servers ...|-cluster DIR
  experiment  named experiments and the report: experiment list | run NAME...|all [-profile quick|paper] | report DIR | compare DIR_A DIR_B
  plot      redraw figures: plot RESULTS_DIR (every figures.json under it -> PNG and SVG)
  systems   the registered systems and their roles (studied, baseline; reference) [-json]
  version   module version, VCS revision (+dirty) and Go version of this binary (from its build info) [-json]
  help      this text

Run 'nezha <command> -h' for the flags of a command.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	reg, err := systems.NewRegistry(nezha.Nezha(), nezha.NezhaNoGC(), baseline.Original(), baseline.PASV(), baseline.BlobDB(),
		dwisckey.System())
	if err != nil {
		fmt.Fprintln(stderr, "nezha:", err)
		return 1
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		err = node.Serve(rest, reg, stdout, stderr)
	case "cluster":
		err = cluster.Command(rest, reg.Names(), stdout, stderr)
	case "kv":
		err = kvcli.Run(rest, stdout, stderr)
	case "check":
		err = linearizability.Command(rest, stdout, stderr)
	case "bench":
		err = workloads.Command(rest, stdout, stderr)
	case "ycsb":
		err = ycsb.Command(rest, stdout, stderr)
	case "experiment":
		err = experiments.Command(rest, reg, stdout, stderr)
	case "plot":
		err = plots.Command(rest, stdout, stderr)
	case "systems":
		err = systems.SystemsCommand(rest, reg, stdout)
	case "version":
		err = buildinfo.Command(rest, stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = systems.Usagef("unknown command %q (run 'nezha help')", cmd)
	}
	return exitCode(err, stderr)
}

// exitCode prints err and maps it to the exit status: 0 ok, 1 failure or
// not found, 2 bad usage.
func exitCode(err error, stderr io.Writer) int {
	var ue *systems.UsageError
	switch {
	case err == nil, errors.Is(err, systems.ErrHelp):
		return 0
	case errors.Is(err, kvcli.ErrNotFound):
		fmt.Fprintln(stderr, "not found")
		return 1
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "nezha:", ue.Msg)
		return 2
	}
	fmt.Fprintln(stderr, "nezha:", err)
	return 1
}
