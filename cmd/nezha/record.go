package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/experiments"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/workloads"
)

// A record is a results directory kept in the repository as one Markdown
// file, docs/results/<date>-<name>.md: the run's command, date, commit and
// machine, and its report.md as the run wrote it. Figures stay in the
// results directory (they are named, not shown), except the headline
// figure, which is copied beside the record for the README.

// headlineBegin and headlineEnd mark the README's generated headline block.
const (
	headlineBegin = "<!-- headline:begin"
	headlineEnd   = "<!-- headline:end -->"
)

// headlineFigure is the figure the README shows above the headline table,
// as a path in a results directory (put-scale's ratio over original
// against data per node, beside the paper's).
const headlineFigure = "put-scale/put-scale-ratio.svg"

// imageRE matches a Markdown image, ![alt](path).
var imageRE = regexp.MustCompile(`!\[([^\]]*)\]\(([^)\s]+)\)`)

// runRecord is what a record names about the run it keeps.
type runRecord struct {
	dir     string // the results directory, as given
	info    workloads.RunInfo
	profile string
	exps    []string
	report  []byte
}

// loadRunRecord reads dir's config.json and report.md.
func loadRunRecord(dir string) (*runRecord, error) {
	r := &runRecord{dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, cmdline.Usagef("experiment record: %s is not a results directory of experiment run: %v", dir, err)
	}
	var cfg struct {
		Profile struct {
			Name string `json:"name"`
		} `json:"profile"`
		Experiments []string `json:"experiments"`
	}
	r.info.Config = &cfg
	if err := json.Unmarshal(b, &r.info); err != nil {
		return nil, fmt.Errorf("experiment record: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	if r.info.Tool != "experiment" || cfg.Profile.Name == "" || len(cfg.Experiments) == 0 {
		return nil, cmdline.Usagef("experiment record: %s/config.json was not written by experiment run", dir)
	}
	r.profile, r.exps = cfg.Profile.Name, cfg.Experiments
	if r.report, err = os.ReadFile(filepath.Join(dir, "report.md")); err != nil {
		return nil, cmdline.Usagef("experiment record: %s has no report.md (write it with experiment report %s): %v", dir, dir, err)
	}
	return r, nil
}

// name is the record's default name: <date>-<profile>-<experiments>.
func (r *runRecord) name() string {
	return r.info.Start.UTC().Format("2006-01-02") + "-" + r.profile + "-" + strings.Join(r.exps, "-")
}

// commit is the run's commit as a record shows it.
func (r *runRecord) commit() string {
	c := r.info.GitCommit
	if r.info.GitDirty {
		c += "+dirty (uncommitted changes)"
	}
	return c
}

// machine is the controller's machine in one line.
func (r *runRecord) machine() string {
	i := r.info
	s := fmt.Sprintf("%s, %d CPUs (%s), kernel %s, %s", i.Hostname, i.CPUs, i.CPUModel, i.Kernel, i.GoVersion)
	if i.DataDevice != "" {
		s += fmt.Sprintf("; results on %s, readahead %d KiB", i.DataDevice, i.ReadAheadKB)
	}
	return s
}

// command is the run's command line, for a code span.
func (r *runRecord) command() string { return strings.Join(r.info.Command, " ") }

// writeRecord writes the record as Markdown: the run's facts, then
// report.md with its title dropped and its images turned into their
// captions and paths in the results directory.
func (r *runRecord) writeRecord(w io.Writer) {
	fmt.Fprintf(w, "# Experiment run: %s, profile %s\n\n", strings.Join(r.exps, ", "), r.profile)
	fmt.Fprintf(w, "Written by `nezha experiment record %s` from the run's own files; below the list is its\n", r.dir)
	fmt.Fprintf(w, "`report.md` as the run wrote it. Figures are named, not shown: they stay in the results directory.\n\n")
	fmt.Fprintf(w, "- command: `%s`\n", r.command())
	fmt.Fprintf(w, "- started: %s\n", r.info.Start.UTC().Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(w, "- commit: %s (%s)\n", r.commit(), r.info.GitCommitSource)
	fmt.Fprintf(w, "- machine: %s\n\n", r.machine())
	report := r.report
	if first, rest, ok := bytes.Cut(report, []byte("\n")); ok && bytes.HasPrefix(first, []byte("# ")) {
		report = rest
	}
	report = imageRE.ReplaceAll(report, []byte("*Figure: $1* (`$2` in the results directory)"))
	w.Write(bytes.TrimLeft(report, "\n"))
}

// rewriteHeadline returns readme with its headline block replaced by
// block; the markers must be there once each, begin before end.
func rewriteHeadline(readme []byte, block string) ([]byte, error) {
	b := bytes.Index(readme, []byte(headlineBegin))
	e := bytes.Index(readme, []byte(headlineEnd))
	switch {
	case b < 0 || e < 0 || e < b:
		return nil, fmt.Errorf("no headline block (a line starting %q, then one %q)", headlineBegin, headlineEnd)
	case bytes.Count(readme, []byte(headlineBegin)) > 1 || bytes.Count(readme, []byte(headlineEnd)) > 1:
		return nil, fmt.Errorf("more than one headline block")
	}
	var out bytes.Buffer
	out.Write(readme[:b])
	out.WriteString(block)
	out.Write(readme[e:])
	return out.Bytes(), nil
}

// headlineBlock is the README's headline block for the run recorded at
// recordPath, with the figure at figurePath ("" for none); both paths are
// relative to the README.
func (r *runRecord) headlineBlock(hs []experiments.Headline, recordPath, figurePath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: written by `nezha experiment record -readme`; edits here are overwritten -->\n", headlineBegin)
	if figurePath != "" {
		fmt.Fprintf(&b, "![PUT goodput over original's against data per node, beside the paper's](%s)\n\n", figurePath)
	}
	fmt.Fprintf(&b, "Measured by `%s` on %s at commit %s, on %s. The whole run: [%s](%s).\n\n",
		r.command(), r.info.Start.UTC().Format("2006-01-02"), r.commit(), r.machine(), recordPath, recordPath)
	experiments.WriteHeadlines(&b, hs)
	return b.String()
}

// recordOptions are experiment record's flags.
type recordOptions struct {
	docsDir string // where records go
	name    string // the record's name ("": <date>-<profile>-<experiments>)
	readme  string // the README whose headline block to rewrite ("": none)
}

// record writes dir's record under o.docsDir (refusing to replace one) and,
// with o.readme, the README's headline block and the headline figure
// beside the record; it returns the record's path.
func record(dir string, o recordOptions) (string, error) {
	r, err := loadRunRecord(dir)
	if err != nil {
		return "", err
	}
	name := r.name()
	if o.name != "" {
		if strings.ContainsAny(o.name, `/\`) || strings.HasPrefix(o.name, ".") {
			return "", cmdline.Usagef("experiment record: -name %q: want a file name without a directory", o.name)
		}
		name = o.name
	}
	path := filepath.Join(o.docsDir, name+".md")
	if _, err := os.Stat(path); err == nil {
		return "", cmdline.Usagef("experiment record: %s exists; records are not replaced (give -name for another)", path)
	}
	var readme []byte
	var hs []experiments.Headline
	if o.readme != "" {
		if readme, err = os.ReadFile(o.readme); err != nil {
			return "", cmdline.Usagef("experiment record: -readme: %v", err)
		}
		if _, err := rewriteHeadline(readme, ""); err != nil {
			return "", cmdline.Usagef("experiment record: -readme %s: %v", o.readme, err)
		}
		results, err := experiments.LoadResults(dir)
		if err != nil {
			return "", err
		}
		if hs = experiments.Headlines(results); !experiments.AnyMeasured(hs) {
			return "", cmdline.Usagef("experiment record: %s measured no headline ratio (run put-scale, get-zipf or scan), so it cannot be the README's headline", dir)
		}
	}
	if err := os.MkdirAll(o.docsDir, 0o755); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	r.writeRecord(&buf)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	if o.readme == "" {
		return path, nil
	}
	rel := func(p string) string {
		abs, _ := filepath.Abs(p)
		base, _ := filepath.Abs(filepath.Dir(o.readme))
		if r, err := filepath.Rel(base, abs); err == nil {
			return filepath.ToSlash(r)
		}
		return filepath.ToSlash(p)
	}
	figure := ""
	if svg, err := os.ReadFile(filepath.Join(dir, headlineFigure)); err == nil {
		fdir := filepath.Join(o.docsDir, name)
		if err := os.MkdirAll(fdir, 0o755); err != nil {
			return "", err
		}
		fpath := filepath.Join(fdir, filepath.Base(headlineFigure))
		if err := os.WriteFile(fpath, svg, 0o644); err != nil {
			return "", err
		}
		figure = rel(fpath)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	out, err := rewriteHeadline(readme, r.headlineBlock(hs, rel(path), figure))
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(o.readme, out, 0o644)
}

// experimentRecord is `nezha experiment record DIR [-docs DIR] [-name N]
// [-readme FILE]`.
func (c *cli) experimentRecord() *ffcli.Command {
	fs := c.flagSet("experiment record")
	var o recordOptions
	fs.StringVar(&o.docsDir, "docs", filepath.Join("docs", "results"), "directory the record is written to")
	fs.StringVar(&o.name, "name", "", "the record's file name without .md (default <date>-<profile>-<experiments>, the date the run started)")
	fs.StringVar(&o.readme, "readme", "", "also rewrite this README's headline block (between "+headlineBegin+" ...> and "+headlineEnd+") from the run, and copy the headline figure beside the record")
	return c.command("record", experimentUsage, fs, func(_ context.Context, args []string) error {
		dirs, err := c.parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		if len(dirs) != 1 {
			return cmdline.Usagef("experiment record: want one results directory")
		}
		path, err := record(dirs[0], o)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, path)
		return nil
	})
}
