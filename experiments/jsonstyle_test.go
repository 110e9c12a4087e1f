package experiments

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/experiments/probe"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/linearizability"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
	"github.com/nezha-harness/nezha/ycsb"
)

// snakeCase is the one JSON key style of the harness's results files and
// -json outputs (the dominant one: 137 snake_case tags against 38
// camelCase ones when this test was added; those were renamed, and
// cluster.json still loads the old keys).
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestJSONKeysSnakeCase walks, by reflection, the structs written to
// results files and -json outputs (and every struct of this module they
// hold) and fails on a json tag that is not snake_case, and on an exported
// field without a json tag in a struct that tags others (it would be
// written under its Go name).
func TestJSONKeysSnakeCase(t *testing.T) {
	roots := []any{
		Result{}, Profile{}, putRun{}, windowStats{}, probe.CPUProfileSummary{},
		linearizability.Result{}, linearizability.CheckOutcome{}, linearizability.Anomaly{}, linearizability.Op{},
		linearizability.PatchStats{}, linearizability.Input{}, linearizability.Output{},
		faults.Schedule{}, faults.ScheduleOptions{}, faults.Event{}, faults.Window{},
		cluster.Spec{}, cluster.StatusRow{}, cluster.IOStats{},
		workloads.RunInfo{}, workloads.Summary{}, workloads.Result{}, workloads.PutOptions{}, workloads.GetOptions{}, workloads.ScanOptions{},
		ycsb.Result{}, plots.Figure{},
		systems.GCRound{}, systems.StorageShape{}, systems.SystemInfo{}, buildinfo.Info{},
	}
	seen := map[reflect.Type]bool{}
	var walk func(tp reflect.Type, path string)
	walk = func(tp reflect.Type, path string) {
		for tp.Kind() == reflect.Pointer || tp.Kind() == reflect.Slice || tp.Kind() == reflect.Array || tp.Kind() == reflect.Map {
			tp = tp.Elem()
		}
		if tp.Kind() != reflect.Struct || seen[tp] || !strings.HasPrefix(tp.PkgPath(), "github.com/nezha-harness/nezha") ||
			strings.HasSuffix(tp.PkgPath(), "/kvpb") { // generated from kv.proto: protoc's names
			return
		}
		seen[tp] = true
		tagged := false
		for f := range tp.Fields() {
			if _, ok := f.Tag.Lookup("json"); ok {
				tagged = true
			}
		}
		for f := range tp.Fields() {
			if !f.IsExported() {
				continue
			}
			tag, ok := f.Tag.Lookup("json")
			name, _, _ := strings.Cut(tag, ",")
			where := tp.String() + "." + f.Name + " (from " + path + ")"
			switch {
			case name == "-":
				continue
			case !ok || name == "":
				if tagged && !f.Anonymous {
					t.Errorf("%s has no json name: it is written as %q", where, f.Name)
				}
			case !snakeCase.MatchString(name):
				t.Errorf("%s: json key %q is not snake_case", where, name)
			}
			walk(f.Type, path)
		}
	}
	for _, r := range roots {
		tp := reflect.TypeOf(r)
		walk(tp, tp.String())
	}
	if len(seen) < len(roots) {
		t.Fatalf("walked %d structs from %d roots", len(seen), len(roots))
	}
}
