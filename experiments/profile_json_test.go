package experiments

import (
	"encoding/json"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestProfileJSON compares the JSON of each built-in profile (as written to
// a run's config.json) with testdata/profiles.txt: a change of a profile's
// values, keys or key order shows up there (go test -run TestProfileJSON
// ./experiments -rewrite regenerates it).
//
//	profile name=quick|standard|paper
func TestProfileJSON(t *testing.T) {
	datadriven.RunTest(t, "testdata/profiles.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "profile" {
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		var name string
		d.ScanArgs(t, "name", &name)
		p, err := ProfileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	})
}
