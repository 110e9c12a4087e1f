package cmdline

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestSubcommandHelp(t *testing.T) {
	for _, sub := range []string{"-h", "-help", "--help", "help"} {
		var b bytes.Buffer
		if err := SubcommandHelp(sub, &b, "usage: x\n  a  b\n"); !errors.Is(err, ErrHelp) || !strings.HasPrefix(b.String(), "usage: x") {
			t.Fatalf("%s: %v, %q", sub, err, b.String())
		}
	}
	var b bytes.Buffer
	if err := SubcommandHelp("put", &b, "usage"); err != nil || b.Len() != 0 {
		t.Fatalf("put: %v, %q", err, b.String())
	}
}
