// Package scen holds what the franz-go and sarama conformance scenarios share:
// argument parsing, a whole-run watchdog, failure reporting and record checks.
package scen

import (
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// N is the number of records produced: keys k0..k99, values v0..v99.
const N = 100

// TotalTimeout bounds a whole scenario run.
const TotalTimeout = 120 * time.Second

// Scenario carries a run's client name, arguments and current step.
type Scenario struct {
	Client    string
	Bootstrap string
	Prefix    string

	mu      sync.Mutex
	step    string
	started time.Time
}

// Start parses `<bootstrap> <prefix>` and arms the watchdog that fails the run
// after TotalTimeout.
func Start(client string) *Scenario {
	if len(os.Args) != 3 {
		fmt.Fprintf(os.Stderr, "usage: %s <bootstrap host:port> <unique prefix>\n", os.Args[0])
		os.Exit(2)
	}
	s := &Scenario{Client: client, Bootstrap: os.Args[1], Prefix: os.Args[2], step: "start", started: time.Now()}
	time.AfterFunc(TotalTimeout, func() {
		s.Failf("scenario did not finish within %s", TotalTimeout)
	})
	return s
}

// Step names the step that a later failure is reported under. SCENARIO_TRACE=1
// prints each step's start time on stderr.
func (s *Scenario) Step(name string) {
	s.mu.Lock()
	s.step = name
	s.mu.Unlock()
	if os.Getenv("SCENARIO_TRACE") != "" {
		fmt.Fprintf(os.Stderr, "[%d ms] %s\n", time.Since(s.started).Milliseconds(), name)
	}
}

// Failf reports a failure on stderr and exits 1.
func (s *Scenario) Failf(format string, args ...any) {
	s.mu.Lock()
	step := s.step
	s.mu.Unlock()
	fmt.Fprintf(os.Stderr, "FAIL %s [%s]: %s\n", s.Client, step, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// Check fails the run when err is not nil.
func (s *Scenario) Check(err error, what string) {
	if err != nil {
		s.Failf("%s: %v", what, err)
	}
}

// Assert fails the run when cond is false.
func (s *Scenario) Assert(cond bool, format string, args ...any) {
	if !cond {
		s.Failf(format, args...)
	}
}

// OK prints the success line and exits 0.
func (s *Scenario) OK(module string) {
	fmt.Printf("OK %s %s\n", s.Client, ModuleVersion(module))
	os.Exit(0)
}

// ModuleVersion is the version of a dependency as built into this binary.
func ModuleVersion(module string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == module {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}

// Key and Value are the i'th record's key and value.
func Key(i int) string   { return "k" + strconv.Itoa(i) }
func Value(i int) string { return "v" + strconv.Itoa(i) }

// Record is one consumed record.
type Record struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
}

// Matches says whether r's key and value are a produced pair (kI, vI).
func (r Record) Matches() bool {
	if !strings.HasPrefix(r.Key, "k") {
		return false
	}
	i, err := strconv.Atoi(r.Key[1:])
	return err == nil && i >= 0 && i < N && r.Value == Value(i)
}

// CheckAll asserts that recs are exactly k0..k99 with v0..v99, each once.
func (s *Scenario) CheckAll(recs []Record, what string) {
	s.Assert(len(recs) == N, "%s: got %d records, want %d", what, len(recs), N)
	seen := map[string]string{}
	for _, r := range recs {
		_, dup := seen[r.Key]
		s.Assert(!dup, "%s: key %q received twice", what, r.Key)
		seen[r.Key] = r.Value
	}
	for i := 0; i < N; i++ {
		v, ok := seen[Key(i)]
		s.Assert(ok, "%s: key %s missing", what, Key(i))
		s.Assert(v == Value(i), "%s: key %s has value %q, want %q", what, Key(i), v, Value(i))
	}
}

// SortedPartitions lists the keys of m in order.
func SortedPartitions[V any](m map[int32]V) []int32 {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}
