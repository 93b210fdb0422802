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

// Scenario carries a run's client name, arguments, topic and group names and
// current step.
type Scenario struct {
	Client    string
	Bootstrap string
	Prefix    string
	Topic     string // <prefix>-t, 3 partitions
	TmpTopic  string // <prefix>-tmp, created and deleted
	Group     string // <prefix>-g, the 2-member consumer group

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
	return StartWith(client, os.Args[1], os.Args[2], TotalTimeout)
}

// StartWith is Start for a scenario whose caller parsed the arguments itself,
// with its own watchdog timeout.
func StartWith(client, bootstrap, prefix string, timeout time.Duration) *Scenario {
	s := &Scenario{
		Client: client, Bootstrap: bootstrap, Prefix: prefix,
		Topic: prefix + "-t", TmpTopic: prefix + "-tmp", Group: prefix + "-g",
		step: "start", started: time.Now(),
	}
	time.AfterFunc(timeout, func() {
		s.Failf("scenario did not finish within %s", timeout)
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

// GoEach runs fn(item) on a goroutine of its own for each item; the returned wait
// waits for all of them to return.
func GoEach[T any](items []T, fn func(T)) (wait func()) {
	var wg sync.WaitGroup
	for _, item := range items {
		wg.Add(1)
		go func(item T) {
			defer wg.Done()
			fn(item)
		}(item)
	}
	return wg.Wait
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

// SeekPartition picks the first partition with at least two records, to consume
// from its last offset; lowName and highName say what low and high are in the failure.
func (s *Scenario) SeekPartition(low, high map[int32]int64, lowName, highName string) int32 {
	for _, q := range SortedPartitions(high) {
		if high[q]-low[q] >= 2 {
			return q
		}
	}
	s.Failf("no partition has >= 2 records: %s %v %s %v", lowName, low, highName, high)
	return -1
}

// CheckFromOffset asserts that got, consumed from topic/p@want, is that one record.
func (s *Scenario) CheckFromOffset(got []Record, topic string, p int32, want int64) {
	s.Assert(len(got) == 1, "consume from %s/%d@%d: got %d records %v, want 1", topic, p, want, len(got), got)
	s.Assert(got[0].Partition == p && got[0].Offset == want, "consume from offset: got %+v, want %s/%d@%d", got[0], topic, p, want)
	s.Assert(got[0].Matches(), "consume from offset: bad record %+v", got[0])
}

// Member is what one consumer group member was given and consumed; each client's
// member type embeds it. Mu guards it and the client's own fields.
type Member struct {
	Name     string
	Mu       sync.Mutex
	Got      []Record
	Last     map[int32]int64 // partition -> last offset consumed
	Assigned []int32         // partitions the group assigned (sarama: claimed)
}

// NewMember is a Member with nothing consumed yet.
func NewMember(name string) Member {
	return Member{Name: name, Last: map[int32]int64{}}
}

// Consumed notes r; the caller holds Mu.
func (m *Member) Consumed(r Record) {
	m.Got = append(m.Got, r)
	m.Last[r.Partition] = r.Offset
}

// WaitConsumed waits until the members consumed N records in all (45 s at most),
// then one more second for any extra.
func (s *Scenario) WaitConsumed(members []*Member) {
	count := func() int {
		n := 0
		for _, m := range members {
			m.Mu.Lock()
			n += len(m.Got)
			m.Mu.Unlock()
		}
		return n
	}
	deadline := time.Now().Add(45 * time.Second)
	for count() < N && time.Now().Before(deadline) {
		time.Sleep(25 * time.Millisecond)
	}
	s.Assert(count() >= N, "group consumed %d records within 45s, want %d", count(), N)
	time.Sleep(time.Second)
}

// CheckGroup asserts that the members' assignments split the 3 partitions, that
// each member consumed only from its own, and that together they consumed k0..k99
// once each. check(i) runs first for members[i], under its Mu: the client's own
// checks (that it got partitions, that the group did not rebalance).
func (s *Scenario) CheckGroup(members []*Member, check func(i int)) {
	var union []Record
	owner := map[int32]string{}
	for i, m := range members {
		m.Mu.Lock()
		check(i)
		for _, q := range m.Assigned {
			o, dup := owner[q]
			s.Assert(!dup, "partition %d assigned to both %s and %s", q, o, m.Name)
			owner[q] = m.Name
		}
		for _, r := range m.Got {
			s.Assert(owner[r.Partition] == m.Name, "%s received partition %d outside its assignment %v", m.Name, r.Partition, m.Assigned)
		}
		union = append(union, m.Got...)
		m.Mu.Unlock()
	}
	s.Assert(len(owner) == 3, "assignments %v do not cover the 3 partitions", owner)
	s.CheckAll(union, "consumer group")
}
