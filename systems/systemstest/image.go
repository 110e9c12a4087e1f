package systemstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DockerMissing says why tests of the docker backend cannot run here (no
// docker command, no daemon that answers, not root: the test enters the
// containers' network namespaces), or "" if they can.
func DockerMissing() string {
	if _, err := exec.LookPath("docker"); err != nil {
		return "no docker command on PATH"
	}
	if os.Geteuid() != 0 {
		return "not root"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Sprintf("no Docker daemon answers (%v: %s)", err, firstLine(out))
	}
	return ""
}

// BuildImage builds the nezha image of the module rooted at moduleDir
// (scripts/image.sh, which also builds moduleDir/bin/nezha and
// bin/nezha-static) under a tag of its own, nezha:test-RANDOM, and returns
// the tag and a function that removes the image. Builds of one checkout
// take turns (flock(1) on bin/.image.lock, when the command exists), as
// tests of several packages may build at once.
func BuildImage(moduleDir string) (tag string, remove func() error, err error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	tag = "nezha:test-" + hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Join(moduleDir, "bin"), 0o755); err != nil {
		return "", nil, err
	}
	args := []string{"scripts/image.sh"}
	if _, err := exec.LookPath("flock"); err == nil {
		args = append([]string{"flock", filepath.Join("bin", ".image.lock")}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "NEZHA_IMAGE="+tag)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", nil, fmt.Errorf("NEZHA_IMAGE=%s scripts/image.sh: %v: %s", tag, err, lastLine(out.Bytes()))
	}
	remove = func() error {
		if b, err := exec.Command("docker", "image", "rm", tag).CombinedOutput(); err != nil {
			return fmt.Errorf("docker image rm %s: %v: %s", tag, err, firstLine(b))
		}
		return nil
	}
	return tag, remove, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	return s[strings.LastIndexByte(s, '\n')+1:]
}
