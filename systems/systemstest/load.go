package systemstest

import (
	"bufio"
	"bytes"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// progressLine matches a progress line of `nezha bench` and `nezha ycsb`
// (workloads.StartProgress without a terminal) and captures the count of
// operations done.
var progressLine = regexp.MustCompile(`: (\d+)/\d+ ops \(`)

// RunLoad runs cmd, a `nezha bench` or `nezha ycsb` run with an -interval
// (progress lines), calls at once when a progress line first counts at
// least ops operations done, and waits for it: a test acts on a load in
// progress (a fault, a signal) without sleeping. It returns cmd's stdout
// and stderr, whether at ran, and cmd's error (an *exec.ExitError for a
// non-zero exit).
func RunLoad(cmd *exec.Cmd, ops int, at func()) (stdout, stderr string, ran bool, err error) {
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", "", false, err
	}
	if err := cmd.Start(); err != nil {
		return "", "", false, err
	}
	var outBuf strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		outBuf.WriteString(sc.Text() + "\n")
		if m := progressLine.FindStringSubmatch(sc.Text()); !ran && m != nil {
			if n, _ := strconv.Atoi(m[1]); n >= ops {
				at()
				ran = true
			}
		}
	}
	err = cmd.Wait()
	return outBuf.String(), errBuf.String(), ran, err
}
