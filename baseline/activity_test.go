package baseline

import (
	"fmt"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/systems"
)

// TestActivityProperties: the properties the activity poll reads exist
// in this RocksDB (a misspelt name reads as not ok), and a closed store
// reads nothing.
func TestActivityProperties(t *testing.T) {
	s := openTest(t, testConfig(ModeOriginal), t.TempDir())
	mustApply(t, s, put(1, "k", "v"))
	a, ok := s.readActivity()
	if !ok {
		t.Fatal("could not read the activity properties of an open store")
	}
	if a.stopped != 0 || a.delayedRate != 0 {
		t.Errorf("an idle store reads as stalled: %+v", a)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.readActivity(); ok {
		t.Error("read activity properties of a closed store")
	}
}

// TestRecordActivity: a run of polls makes one write stall across
// stopped and delayed polls; Close ends what goes on. (Compactions come
// from RocksDB's info log: TestBackgroundJobsOfRocksDB.)
func TestRecordActivity(t *testing.T) {
	s := openTest(t, testConfig(ModeOriginal), t.TempDir())
	s.stopActivityWatch() // the test polls by hand
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for i, a := range []rocksActivity{
		{},
		{},
		{stopped: 1},
		{delayedRate: 16e6},
		{},
		{delayedRate: 8e6},
	} {
		s.recordActivity(at(50*i), a)
	}
	got := s.Activities(t0)
	want := []systems.Activity{
		{Kind: systems.ActivityWriteStall, Start: at(100), End: at(200), Detail: "writes stopped"},
		{Kind: systems.ActivityWriteStall, Start: at(250), Detail: "writes delayed to 8.0 MB/s"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("activities:\n got %v\nwant %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got = s.Activities(t0)
	if last := got[len(got)-1]; last.End.IsZero() || last.Detail != "writes delayed to 8.0 MB/s, store closed" {
		t.Errorf("after Close: %v", last)
	}
}
