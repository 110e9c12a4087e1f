package baseline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nezha-harness/nezha/internal/activity"
)

// RocksDB has no event listener in its C API, so the store learns when its
// flushes and compactions ran (Activities) from RocksDB's info log (<dir>/LOG), which
// records each as machine-readable EVENT_LOG_v1 lines (RocksDB 7.8,
// db/event_helpers.cc, db/flush_job.cc, db/compaction/compaction_job.cc):
//
//	... EVENT_LOG_v1 {"time_micros": 1796442077474347, "job": 7, "event": "compaction_started", "compaction_reason": "LevelL0FilesNum", ..., "input_data_size": 3620788, ...}
//	... EVENT_LOG_v1 {"time_micros": 1796442077540041, "job": 7, "event": "compaction_finished", "compaction_time_micros": 46797, "output_level": 1, ..., "total_output_size": 3618107, ...}
//
// time_micros is the wall clock when the event happened (a buffered line
// is written later, its own time is not used). The column family of a job
// is on its text lines ("[default] [JOB 7] Compacting 4@0 files to L1").
// RocksDB writes the lines of a job at its end at the latest (it flushes
// its info log after every background job), so a job shows up as running
// once its start is written and as done after it finished.

// eventLogTag precedes the JSON of an event line.
var eventLogTag = []byte("EVENT_LOG_v1 ")

// jobCFRe finds a job's column family on a text line: "[default] [JOB 7]".
var jobCFRe = regexp.MustCompile(`\[([^\[\]]+)\] \[JOB ([0-9]+)\]`)

// maxJobCFs bounds the column family map: jobs whose text lines are never
// followed by events (a purge) would otherwise stay in it.
const maxJobCFs = 4096

// rocksEvent is the part of an EVENT_LOG_v1 line the jobs use.
type rocksEvent struct {
	TimeMicros           int64  `json:"time_micros"`
	Job                  int64  `json:"job"`
	Event                string `json:"event"`
	CFName               string `json:"cf_name"`
	FlushReason          string `json:"flush_reason"`
	CompactionReason     string `json:"compaction_reason"`
	TotalDataSize        int64  `json:"total_data_size"`
	InputDataSize        int64  `json:"input_data_size"`
	TotalOutputSize      int64  `json:"total_output_size"`
	CompactionTimeMicros int64  `json:"compaction_time_micros"`
	OutputLevel          int    `json:"output_level"`
	FileSize             int64  `json:"file_size"`
	TotalBlobBytes       int64  `json:"total_blob_bytes"`
}

// Kinds of rocksJob.
const (
	jobFlush      = "flush"
	jobCompaction = "compaction"
)

// maxJobs is how many ended jobs rocksJobs keeps.
const maxJobs = activity.HistoryLen

// rocksJob is one flush or compaction of RocksDB.
type rocksJob struct {
	kind string // jobFlush, jobCompaction
	// id is RocksDB's JOB number: unique while the database stays open.
	id int64
	cf string // column family; "" if the log did not say
	// end is zero while the job runs.
	start, end time.Time
	reason     string // RocksDB's flush_reason, compaction_reason
	// inputBytes: the memtable's data (a flush) or the input files (a
	// compaction); outputBytes: the files it wrote, blob files included.
	inputBytes, outputBytes int64
	outputLevel             int
}

// detail describes j for an activity: "job 7 [default] LevelL0FilesNum
// to L1: 3.6 MB in, 3.6 MB out".
func (j rocksJob) detail() string {
	return fmt.Sprintf("job %d [%s] %s to L%d: %.1f MB in, %.1f MB out", j.id, j.cf, j.reason, j.outputLevel, float64(j.inputBytes)/1e6, float64(j.outputBytes)/1e6)
}

// rocksJobs follows a RocksDB info log and keeps its flushes and
// compactions. It reads what was appended
// since the last call, on request only: nothing runs on the write path or
// in the background. When the file is replaced (RocksDB renames its LOG
// to LOG.old.* each time the database opens: a restart, a snapshot
// restore), it starts over at the new file's beginning; the jobs of the
// old one that it had read are kept, those it had not and those still
// running then are lost. Safe for concurrent use.
type rocksJobs struct {
	path string

	mu   sync.Mutex
	file os.FileInfo // the file read so far; nil before the first read
	off  int64       // bytes of it read, up to the last complete line
	cfs  map[int64]string
	run  map[int64]*rocksJob
	done []rocksJob
}

func newRocksJobs(path string) *rocksJobs {
	return &rocksJobs{path: path, cfs: map[int64]string{}, run: map[int64]*rocksJob{}}
}

// jobs reads the log's new lines and returns the kept jobs (the last
// maxJobs ended ones and the running ones, with a zero end) in the order
// they started. An unreadable log leaves what was read before.
func (r *rocksJobs) jobs() []rocksJob {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.follow() // a report: what could be read
	out := slices.Clone(r.done)
	for _, j := range r.run {
		out = append(out, *j)
	}
	slices.SortStableFunc(out, func(a, b rocksJob) int { return a.start.Compare(b.start) })
	return out
}

// follow reads the complete lines appended since the last call.
func (r *rocksJobs) follow() error {
	f, err := os.Open(r.path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if r.file == nil || !os.SameFile(r.file, st) || st.Size() < r.off {
		r.file, r.off = st, 0
		clear(r.cfs)
		clear(r.run)
	}
	if _, err := f.Seek(r.off, io.SeekStart); err != nil {
		return err
	}
	br := bufio.NewReaderSize(io.LimitReader(f, st.Size()-r.off), 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // a partial last line is read again next time
		}
		if err != nil {
			return err
		}
		r.off += int64(len(line))
		r.line(line)
	}
}

// line takes one line of the log.
func (r *rocksJobs) line(line []byte) {
	i := bytes.Index(line, eventLogTag)
	if i < 0 {
		if m := jobCFRe.FindSubmatch(line); m != nil {
			if job, err := strconv.ParseInt(string(m[2]), 10, 64); err == nil {
				if len(r.cfs) >= maxJobCFs {
					clear(r.cfs)
				}
				r.cfs[job] = string(m[1])
			}
		}
		return
	}
	var ev rocksEvent
	if json.Unmarshal(line[i+len(eventLogTag):], &ev) != nil {
		return // not an event of the version this reads
	}
	at := time.UnixMicro(ev.TimeMicros)
	j := r.run[ev.Job]
	switch ev.Event {
	case "flush_started", "compaction_started":
		j = &rocksJob{kind: jobFlush, id: ev.Job, cf: r.cfs[ev.Job], start: at, reason: ev.FlushReason, inputBytes: ev.TotalDataSize}
		if ev.Event == "compaction_started" {
			j.kind, j.reason, j.inputBytes = jobCompaction, ev.CompactionReason, ev.InputDataSize
		}
		r.run[ev.Job] = j
	case "table_file_creation", "blob_file_creation":
		if j != nil {
			j.outputBytes += ev.FileSize + ev.TotalBlobBytes
			if j.cf == "" {
				j.cf = ev.CFName
			}
		}
	case "flush_finished", "compaction_finished":
		if j == nil {
			if ev.Event == "flush_finished" || ev.CompactionTimeMicros <= 0 {
				return // started before the part of the log read
			}
			// Its start was in a part of the log not read: RocksDB's own
			// timing of it.
			j = &rocksJob{kind: jobCompaction, id: ev.Job, cf: r.cfs[ev.Job], start: at.Add(-time.Duration(ev.CompactionTimeMicros) * time.Microsecond)}
		}
		j.end = at
		if ev.Event == "compaction_finished" {
			j.outputLevel = ev.OutputLevel
			if j.outputBytes == 0 {
				j.outputBytes = ev.TotalOutputSize
			}
		}
		if j.cf == "" {
			j.cf = r.cfs[ev.Job]
		}
		delete(r.run, ev.Job)
		delete(r.cfs, ev.Job)
		r.done = append(r.done, *j)
		if len(r.done) > maxJobs {
			r.done = slices.Delete(r.done, 0, len(r.done)-maxJobs)
		}
	}
}
