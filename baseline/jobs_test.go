package baseline

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/nezha-harness/nezha/systems"
)

// infoLog is a RocksDB 7.8 info log as a store writes it: a flush of the
// meta and one of the default column family, a compaction, and the text
// lines around them (shortened where they are not read).
const infoLog = `2026/12/05-03:41:17.239774 15383 [db/flush_job.cc:861] [default] [JOB 2] Flushing memtable with next log file: 10
2026/12/05-03:41:17.239833 15383 EVENT_LOG_v1 {"time_micros": 1796442077239817, "job": 2, "event": "flush_started", "num_memtables": 1, "num_entries": 61, "num_deletes": 0, "total_data_size": 1000766, "memory_usage": 1133000, "flush_reason": "Write Buffer Full"}
2026/12/05-03:41:17.266780 15383 EVENT_LOG_v1 {"time_micros": 1796442077266752, "cf_name": "default", "job": 2, "event": "table_file_creation", "file_number": 11, "file_size": 1003843, "table_properties": {"data_size": 1001620, "column_family_name": "default"}}
2026/12/05-03:41:17.271576 15383 (Original Log Time 2026/12/05-03:41:17.270688) EVENT_LOG_v1 {"time_micros": 1796442077270681, "job": 2, "event": "flush_finished", "output_compression": "NoCompression", "lsm_state": [1, 0, 0, 0, 0, 0, 0], "immutable_memtables": 0}
2026/12/05-03:41:17.361853 15383 [db/flush_job.cc:861] [meta] [JOB 4] Flushing memtable with next log file: 14
2026/12/05-03:41:17.361902 15383 EVENT_LOG_v1 {"time_micros": 1796442077361896, "job": 4, "event": "flush_started", "num_memtables": 1, "num_entries": 15, "num_deletes": 0, "total_data_size": 375, "memory_usage": 1464, "flush_reason": "WAL Full"}
2026/12/05-03:41:17.384474 15383 (Original Log Time 2026/12/05-03:41:17.366770) EVENT_LOG_v1 {"time_micros": 1796442077366760, "job": 4, "event": "flush_finished", "output_compression": "NoCompression", "lsm_state": [1, 0, 0, 0, 0, 0, 0], "immutable_memtables": 0}
2026/12/05-03:41:17.474315 15382 [db/compaction/compaction_job.cc:1994] [default] [JOB 7] Compacting 4@0 files to L1, score 1.00
2026/12/05-03:41:17.474491 15382 EVENT_LOG_v1 {"time_micros": 1796442077474347, "job": 7, "event": "compaction_started", "compaction_reason": "LevelL0FilesNum", "files_L0": [19, 17, 13, 11], "score": 1, "input_data_size": 3620788, "oldest_snapshot_seqno": -1}
2026/12/05-03:41:17.540109 15382 (Original Log Time 2026/12/05-03:41:17.540054) EVENT_LOG_v1 {"time_micros": 1796442077540041, "job": 7, "event": "compaction_finished", "compaction_time_micros": 46797, "output_level": 1, "num_output_files": 1, "total_output_size": 3618107, "num_input_records": 220, "lsm_state": [0, 1, 0, 0, 0, 0, 0]}
`

func micros(us int64) time.Time { return time.UnixMicro(us) }

// TestRocksJobsReadsTheInfoLog: the flushes and the compaction of a
// recorded info log, with their column families, times and bytes; a line
// still being written is read once it is complete; a job whose start was
// in a part of the log not read takes RocksDB's own timing of it; a new
// log (a reopened database) is read from its beginning.
func TestRocksJobsReadsTheInfoLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "LOG")
	if err := os.WriteFile(path, []byte(infoLog), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRocksJobs(path)
	want := []rocksJob{
		{kind: jobFlush, id: 2, cf: "default", start: micros(1796442077239817), end: micros(1796442077270681),
			reason: "Write Buffer Full", inputBytes: 1000766, outputBytes: 1003843},
		{kind: jobFlush, id: 4, cf: "meta", start: micros(1796442077361896), end: micros(1796442077366760),
			reason: "WAL Full", inputBytes: 375},
		{kind: jobCompaction, id: 7, cf: "default", start: micros(1796442077474347), end: micros(1796442077540041),
			reason: "LevelL0FilesNum", inputBytes: 3620788, outputBytes: 3618107, outputLevel: 1},
	}
	check := func(what string, want []rocksJob) {
		t.Helper()
		got := r.jobs()
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
		}
	}
	check("the recorded log", want)

	// A compaction starts; its line is written in two parts.
	start := `2026/12/05-03:41:18.000000 15382 [db/compaction/compaction_job.cc:1994] [default] [JOB 9] Compacting 1@1 files to L2, score 1.00
2026/12/05-03:41:18.000100 15382 EVENT_LOG_v1 {"time_micros": 1796442078000100, "job": 9, "event": "compaction_started", "compaction_reason": "LevelMaxLevelSize", "input_data_size": 5000000}
`
	cut := len(start) - 40
	appendTo(t, path, start[:cut])
	check("a partial line", want)
	appendTo(t, path, start[cut:])
	running := rocksJob{kind: jobCompaction, id: 9, cf: "default", start: micros(1796442078000100),
		reason: "LevelMaxLevelSize", inputBytes: 5000000}
	check("a running compaction", append(want, running))
	appendTo(t, path, `2026/12/05-03:41:18.500000 15382 (Original Log Time 2026/12/05-03:41:18.400000) EVENT_LOG_v1 {"time_micros": 1796442078400000, "job": 9, "event": "compaction_finished", "compaction_time_micros": 399000, "output_level": 2, "total_output_size": 4900000}
`)
	done := running
	done.end, done.outputLevel, done.outputBytes = micros(1796442078400000), 2, 4900000
	want = append(want, done)
	check("the compaction done", want)

	// The database reopens: RocksDB renames LOG and starts a new one, in
	// which a compaction that began in the old one ends.
	if err := os.Rename(path, path+".old.1796442079000000"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, `2026/12/05-03:41:19.100000 15382 (Original Log Time 2026/12/05-03:41:19.100000) EVENT_LOG_v1 {"time_micros": 1796442079100000, "job": 3, "event": "compaction_finished", "compaction_time_micros": 50000, "output_level": 1, "total_output_size": 1000}
2026/12/05-03:41:19.200000 15382 (Original Log Time 2026/12/05-03:41:19.200000) EVENT_LOG_v1 {"time_micros": 1796442079200000, "job": 4, "event": "flush_finished", "lsm_state": [1, 0, 0, 0, 0, 0, 0]}
`)
	want = append(want, rocksJob{kind: jobCompaction, id: 3, start: micros(1796442079050000), end: micros(1796442079100000),
		outputLevel: 1, outputBytes: 1000})
	check("a new log", want)
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactionActivities: a store whose memtables fill reads RocksDB's
// flushes of its user data from the info log, and reports a compaction
// it was asked for as an activity, timed by RocksDB and with the bytes it
// wrote (blob files included).
func TestCompactionActivities(t *testing.T) {
	for _, m := range []Mode{ModeOriginal, ModeBlobDB} {
		t.Run(string(m), func(t *testing.T) {
			c := testConfig(m)
			c.ScaleGeometry(1e-9) // 64 KiB memtables
			s := openTest(t, c, t.TempDir())
			defer s.Close()
			val := bytes.Repeat([]byte("v"), 4<<10)
			idx := uint64(0)
			for b := 0; b < 32; b++ {
				var ents []systems.AppliedEntry
				for i := 0; i < 16; i++ {
					idx++
					ents = append(ents, put(idx, fmt.Sprintf("k%06d", idx%300), string(val)))
				}
				mustApply(t, s, ents...)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			// Forced: with values in blob files, the SST files are few
			// enough that RocksDB would otherwise leave them as they are.
			co := grocksdb.NewCompactRangeOptions()
			co.SetBottommostLevelCompaction(grocksdb.KForce)
			s.db.CompactRangeCFOpt(s.data, grocksdb.Range{}, co)
			co.Destroy()
			flushes := 0
			for _, j := range s.jobs.jobs() {
				if !j.end.IsZero() && j.end.Before(j.start) || j.end.IsZero() && j.kind == jobFlush {
					t.Errorf("job %+v: ends before it starts, or a flush still runs after Flush", j)
				}
				if j.kind == jobFlush && j.cf == "default" && j.outputBytes > 0 {
					flushes++
				}
			}
			manual := 0
			for _, a := range s.Activities(began.Add(-time.Second)) {
				if a.Kind == systems.ActivityCompaction && strings.Contains(a.Detail, "[default] ManualCompaction to L") &&
					!a.Start.Before(began.Add(-time.Second)) && !a.End.Before(a.Start) && a.Bytes > 0 {
					manual++
				}
			}
			if flushes == 0 || manual == 0 {
				t.Fatalf("%d flushes of the user data that wrote bytes, %d manual compactions reported; want both (jobs %+v, activities %+v)",
					flushes, manual, s.jobs.jobs(), s.Activities(began.Add(-time.Second)))
			}
		})
	}
}
