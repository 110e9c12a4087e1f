package machine

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMachine(t *testing.T) {
	if CPUModel() == "" || Kernel() == "" {
		t.Fatalf("CPU model %q, kernel %q", CPUModel(), Kernel())
	}
	if name, _ := DataDevice("."); name == "" {
		t.Fatal("no device for the working directory")
	}
	if name, path := DataDevice(filepath.Join(t.TempDir(), "missing")); name != "" || path != "" {
		t.Fatalf("a missing directory: %q %q", name, path)
	}
	path := filepath.Join(t.TempDir(), "read_ahead_kb")
	os.WriteFile(path, []byte("4096\n"), 0o644)
	if kb := ReadAheadKB(path); kb != 4096 {
		t.Fatalf("ReadAheadKB = %d, want 4096", kb)
	}
	if kb := ReadAheadKB(path + ".missing"); kb != 0 {
		t.Fatalf("ReadAheadKB of a missing file = %d", kb)
	}
}
