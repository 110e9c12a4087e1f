package baseline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

func TestSystems(t *testing.T) {
	ss := []systems.System{Original(), PASV(), BlobDB(), LSMRaft()}
	reg, err := systems.NewRegistry(ss...)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.Names(), ","); got != "blobdb,lsm-raft,original,pasv" {
		t.Fatalf("names %s", got)
	}
	for _, s := range ss {
		if s.LogDir != "raftlog" || s.Summary == "" {
			t.Errorf("%s: LogDir %q Summary %q", s.Name, s.LogDir, s.Summary)
		}
		c, ok := s.NewConfig().(*Config)
		if !ok || string(c.Mode()) != s.Name {
			t.Fatalf("%s: NewConfig returned %T with mode %v", s.Name, s.NewConfig(), c.Mode())
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: defaults do not validate: %v", s.Name, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	for _, m := range allModes {
		c := NewConfig(m)
		if c.BlockCacheBytes != 64<<20 || c.WriteBufferBytes != 64<<20 || c.Compression != "none" {
			t.Errorf("%s: defaults %+v", m, c)
		}
		wantBlob := int64(0)
		if m == ModeBlobDB {
			wantBlob = 4096
		}
		if c.MinBlobBytes != wantBlob {
			t.Errorf("%s: MinBlobBytes %d, want %d", m, c.MinBlobBytes, wantBlob)
		}
		d := c.Describe()
		for _, k := range []string{"system", "max_background_jobs", "block_cache_bytes", "write_buffer_size",
			"compression", "write_options.sync", "write_options.disable_wal", "enable_blob_files", "atomic_flush"} {
			if _, ok := d[k]; !ok {
				t.Errorf("%s: Describe lacks %q", m, k)
			}
		}
		if d["write_options.disable_wal"] != (m == ModePASV) || d["enable_blob_files"] != (m == ModeBlobDB) {
			t.Errorf("%s: Describe %v", m, d)
		}
		if _, ok := d["min_blob_size"]; ok != (m == ModeBlobDB) {
			t.Errorf("%s: Describe min_blob_size present=%v", m, ok)
		}
	}
}

func TestFlags(t *testing.T) {
	c := NewConfig(ModeBlobDB)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"-rocksdb.blockCacheBytes=1048576", "-rocksdb.writeBufferBytes", "2097152",
		"-rocksdb.compression=zstd", "-rocksdb.minBlobBytes=0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.BlockCacheBytes != 1<<20 || c.WriteBufferBytes != 2<<20 || c.Compression != "zstd" || c.MinBlobBytes != 0 {
		t.Fatalf("parsed %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	// -rocksdb.minBlobBytes exists for blobdb only.
	o := NewConfig(ModeOriginal)
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.RegisterFlags(fs)
	if fs.Lookup("rocksdb.minBlobBytes") != nil {
		t.Fatal("original registers -rocksdb.minBlobBytes")
	}
	for _, name := range []string{"rocksdb.blockCacheBytes", "rocksdb.writeBufferBytes", "rocksdb.compression"} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag -%s missing", name)
		}
	}
}

// lsm-raft's own flags exist for lsm-raft only; their defaults follow the
// write buffer, and Validate reports every bad one at once.
func TestLSMRaftFlags(t *testing.T) {
	c := NewConfig(ModeLSMRaft)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.spanBytes() != DefaultWriteBufferBytes || c.maxHeldBytes() != 4*DefaultWriteBufferBytes || c.SpanIdle != time.Second {
		t.Fatalf("defaults: span %d, held %d, idle %v", c.spanBytes(), c.maxHeldBytes(), c.SpanIdle)
	}
	if d := c.Describe(); d["lsmraft_span_bytes"] != int64(DefaultWriteBufferBytes) || d["ingest_external_file.move_files"] != true {
		t.Fatalf("Describe %v", d)
	}
	// A scaled write buffer makes small spans; the held bound keeps its
	// floor, so that followers do not replay what a span is on its way to
	// cover.
	small := NewConfig(ModeLSMRaft)
	small.WriteBufferBytes = 360 << 10
	if small.spanBytes() != 360<<10 || small.maxHeldBytes() != minHeldBytes {
		t.Fatalf("scaled: span %d, held %d, want held %d", small.spanBytes(), small.maxHeldBytes(), minHeldBytes)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-lsmraft.spanBytes=-1", "-lsmraft.spanIdle=0s", "-lsmraft.maxHeldBytes=-1",
		"-lsmraft.retainSpans=0", "-lsmraft.crashPoint=nowhere"}); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 5 {
		t.Fatalf("want 5 joined errors, got %v", err)
	}
	for _, want := range []string{"spanBytes", "spanIdle", "maxHeldBytes", "retainSpans", "crashPoint"} {
		if !strings.Contains(err.Error(), "-lsmraft."+want) {
			t.Errorf("error %q does not name -lsmraft.%s", err, want)
		}
	}
	o := NewConfig(ModeOriginal)
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if fs.Lookup("lsmraft.spanBytes") != nil {
		t.Fatal("original registers -lsmraft.spanBytes")
	}
	o.SpanIdle = time.Second
	if err := o.Validate(); err == nil {
		t.Error("original with span settings validated")
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := NewConfig(ModeBlobDB)
	c.BlockCacheBytes = -1
	c.WriteBufferBytes = 1000
	c.Compression = "zlib"
	c.MinBlobBytes = -1
	c.TargetFileSizeBytes = 10
	c.SoftPendingCompactionBytes = c.HardPendingCompactionBytes + 1
	c.GeometryScale = 0
	err := c.Validate()
	if err == nil {
		t.Fatal("bad config validated")
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 7 {
		t.Fatalf("want 7 joined errors, got %v", err)
	}
	for _, e := range joined.Unwrap() {
		var ue *cmdline.UsageError
		if !errors.As(e, &ue) {
			t.Errorf("%v is not a *cmdline.UsageError", e)
		}
	}
	for _, want := range []string{"-rocksdb.blockCacheBytes", "-rocksdb.writeBufferBytes", "-rocksdb.compression", "-rocksdb.minBlobBytes",
		"-rocksdb.targetFileSizeBytes", "-rocksdb.softPendingCompactionBytes", "-rocksdb.geometryScale"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}

	o := NewConfig(ModePASV)
	o.MinBlobBytes = 10
	if err := o.Validate(); err == nil {
		t.Error("pasv with MinBlobBytes validated")
	}
	var z Config
	if err := z.Validate(); err == nil || !strings.Contains(err.Error(), "unknown mode") {
		t.Errorf("zero Config: %v", err)
	}
	// Open refuses an invalid configuration before touching the disk.
	if _, err := z.Open(systems.Env{Dir: t.TempDir()}); err == nil {
		t.Error("zero Config opened")
	}
	if _, err := NewConfig(ModeOriginal).Open(systems.Env{}); err == nil {
		t.Error("opened with an empty data directory")
	}
}

// TestCompressions opens every supported compression, checking that the
// linked librocksdb has it.
func TestCompressions(t *testing.T) {
	for _, comp := range []string{"none", "snappy", "lz4", "zstd"} {
		for _, m := range []Mode{ModeOriginal, ModeBlobDB} {
			c := testConfig(m)
			c.Compression = comp
			dir := t.TempDir()
			s := openTest(t, c, dir)
			mustApply(t, s, put(1, "k", strings.Repeat("compressible ", 100)))
			if err := s.Flush(); err != nil {
				t.Fatalf("%s/%s: flush: %v", m, comp, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, c, dir)
			checkState(t, s, model{"k": []byte(strings.Repeat("compressible ", 100))})
			s.Close()
		}
	}
}

// TestOnDiskShape checks the mode differences on disk: pasv writes no WAL
// bytes, original does, and blobdb (only) puts large values in blob files.
func TestOnDiskShape(t *testing.T) {
	for _, m := range allModes {
		c := testConfig(m)
		dir := t.TempDir()
		s := openTest(t, c, dir)
		mustApply(t, s, put(1, "small", "v"), put(2, "large", strings.Repeat("x", 4096)))
		walBytes := sumFileSizes(t, s.Dir(), ".log")
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		blobFiles := len(filesWithSuffix(t, s.Dir(), ".blob"))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if (walBytes == 0) != (m == ModePASV) {
			t.Errorf("%s: %d WAL bytes after Apply", m, walBytes)
		}
		if (blobFiles > 0) != (m == ModeBlobDB) {
			t.Errorf("%s: %d blob files after Flush", m, blobFiles)
		}
	}
}

func filesWithSuffix(t *testing.T, dir, suffix string) []os.FileInfo {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []os.FileInfo
	for _, de := range des {
		if strings.HasSuffix(de.Name(), suffix) {
			fi, err := de.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // RocksDB deleted it meanwhile (an obsolete WAL)
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fi)
		}
	}
	return out
}

func sumFileSizes(t *testing.T, dir, suffix string) int64 {
	t.Helper()
	var n int64
	for _, fi := range filesWithSuffix(t, dir, suffix) {
		n += fi.Size()
	}
	return n
}

// TestWALFilesAreDeleted: the meta column family (one small value) must not
// pin the WAL files that the user data's flushes made obsolete (RocksDB keeps
// them until max_total_wal_size, by default 4 x every column family's write
// buffers: original's space on disk grew by up to 1 GiB of dead WAL).
func TestWALFilesAreDeleted(t *testing.T) {
	for _, m := range []Mode{ModeOriginal, ModeBlobDB} {
		c := testConfig(m)
		c.WriteBufferBytes = 256 << 10
		s := openTest(t, c, t.TempDir())
		value := strings.Repeat("v", 8<<10)
		const entries = 384 // 3 MiB: 12 write buffers, under the default limit (4 MiB)
		for i := uint64(1); i <= entries; i++ {
			mustApply(t, s, put(i, fmt.Sprintf("k%02d", i%16), value))
		}
		bound := 4 * c.WriteBufferBytes
		deadline := time.Now().Add(10 * time.Second)
		for {
			wal := sumFileSizes(t, s.Dir(), ".log")
			if wal <= bound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d bytes of WAL files after writing %d bytes with %d-byte write buffers, want at most %d",
					m, wal, entries*len(value), c.WriteBufferBytes, bound)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScaleGeometry: scaling by data / 100 GB keeps RocksDB's ratios
// (level 1 = 4 write buffers, files = 1 write buffer), floors at 64 KiB,
// and the flags it renders parse back into the same configuration.
func TestScaleGeometry(t *testing.T) {
	c := NewConfig(ModeBlobDB)
	f := float64(1<<30) / PaperDataBytes // 1 GiB per node
	c.ScaleGeometry(f)
	want := func(name string, got, def int64) {
		t.Helper()
		exp := max(int64(float64(def)*f), 64<<10)
		if got != exp {
			t.Errorf("%s = %d, want %d", name, got, exp)
		}
	}
	want("write buffer", c.WriteBufferBytes, DefaultWriteBufferBytes)
	want("level base", c.MaxBytesForLevelBase, DefaultMaxBytesForLevelBase)
	want("file size", c.TargetFileSizeBytes, DefaultTargetFileSizeBytes)
	want("soft pending", c.SoftPendingCompactionBytes, DefaultSoftPendingCompactionBytes)
	want("blob file", c.BlobFileBytes, DefaultBlobFileBytes)
	want("block cache", c.BlockCacheBytes, DefaultBlockCacheBytes)
	if c.MaxBytesForLevelBase/c.WriteBufferBytes != 4 {
		t.Errorf("level base / write buffer = %d, want RocksDB's 4", c.MaxBytesForLevelBase/c.WriteBufferBytes)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("scaled config: %v", err)
	}
	tiny := NewConfig(ModeOriginal)
	tiny.BlockCacheBytes = 0
	tiny.ScaleGeometry(1e-9)
	if tiny.WriteBufferBytes != 64<<10 || tiny.TargetFileSizeBytes != 64<<10 || tiny.BlockCacheBytes != 0 {
		t.Errorf("floors: write buffer %d, file %d, block cache %d", tiny.WriteBufferBytes, tiny.TargetFileSizeBytes, tiny.BlockCacheBytes)
	}
	back := NewConfig(ModeBlobDB)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	back.RegisterFlags(fs)
	if err := fs.Parse(c.GeometryFlags()); err != nil {
		t.Fatal(err)
	}
	if back.Describe()["geometry_scale"] != c.GeometryScale || back.String() != c.String() || back.BlobFileBytes != c.BlobFileBytes {
		t.Errorf("flags do not round-trip:\n%s\n%s", back, c)
	}
}
