// The revoke-commit scenario:
//
//	franz revoke-commit <bootstrap host:port> <unique prefix>
//
// A consumer-group member that commits what it processed in its revoke callback
// while the group prepares a rebalance. Apache Kafka accepts that commit (classic
// protocol: a commit from a member of the current generation is accepted during
// PreparingRebalance), so the next owner of the partitions starts from the
// committed offsets and no record is processed twice. For each variant (range and
// cooperative-sticky balancer, each with and without static membership), on a
// fresh topic <prefix>-<variant> of 4 partitions and a fresh group:
//
//  1. produce 200 records, keys k0..k199;
//  2. member A (no autocommit, BlockRebalanceOnPoll, commits its polled and
//     processed records with CommitUncommittedOffsets in OnPartitionsRevoked)
//     processes at least half of them, then waits for its revoke; member B joins;
//     both consume until together they processed all 200;
//  3. asserts that no key was processed twice (a duplicate means that the commit in
//     the revoke callback was refused or lost), that A's revoke callback ran and
//     its commit succeeded, that B got partitions, and, after each member commits
//     at the end, that the group's committed offsets are the end offsets.
//
// Prints `OK franz-go revoke-commit <version>` when all variants pass, or prints the
// failure to stderr and exits non-zero. The whole run is bounded to 150 s.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"skein/clients/internal/scen"
)

const (
	rcRecords    = 200
	rcPartitions = 4
	rcHalf       = rcRecords / 2
	rcPollMax    = 10 // records per poll, so that A stops close to half
	rcBatch      = 10 // records per ProduceSync
	rcTotal      = 150 * time.Second
)

type rcVariant struct {
	name     string
	balancer func() kgo.GroupBalancer
	static   bool
}

var rcVariants = []rcVariant{
	{"range", kgo.RangeBalancer, false},
	{"range-static", kgo.RangeBalancer, true},
	{"cooperative-sticky", kgo.CooperativeStickyBalancer, false},
	{"cooperative-sticky-static", kgo.CooperativeStickyBalancer, true},
}

// rcProcessed is what the members of one variant processed: key -> who, where.
type rcProcessed struct {
	mu   sync.Mutex
	by   map[string][]string
	dups []string // keys processed more than once, each once, in the order seen
}

func (t *rcProcessed) union() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.by)
}

// rcMember is one group member of a variant. mu guards all but name and cl.
type rcMember struct {
	name string
	cl   *kgo.Client

	mu         sync.Mutex
	processed  int
	perPart    map[int32]int // records processed per partition
	assigned   []int32       // every partition of the topic assigned to it, in order
	revokes    []rcRevoke
	revokeErrs []string
	lost       []string
	closing    bool
	revoked    chan struct{} // closed once a revoke callback that revoked partitions committed
	nRevoked   int           // revoke callbacks that revoked partitions of the topic
}

// rcRevoke is one OnPartitionsRevoked call before closing and its commit.
type rcRevoke struct {
	revoked   []int32                   // partitions of the topic revoked (none: end of a cooperative session)
	committed map[int32]kgo.EpochOffset // what CommitUncommittedOffsets commits (UncommittedOffsets before)
	state     string                    // the group's state (DescribeGroups) just before the commit
}

func (r rcRevoke) String() string {
	offs := make([]string, 0, len(r.committed))
	for _, p := range scen.SortedPartitions(r.committed) {
		offs = append(offs, fmt.Sprintf("%d:%d", p, r.committed[p].Offset))
	}
	return fmt.Sprintf("{revoked %v, committing [%s] in group state %s}", r.revoked, strings.Join(offs, " "), r.state)
}

func revokeCommit() {
	if len(os.Args) != 4 {
		fmt.Fprintf(os.Stderr, "usage: %s revoke-commit <bootstrap host:port> <unique prefix>\n", os.Args[0])
		os.Exit(2)
	}
	s = scen.StartWith("franz-go revoke-commit", os.Args[2], os.Args[3], rcTotal)
	acl := newClient()
	adm := kadm.NewClient(acl)
	for _, v := range rcVariants {
		start := time.Now()
		summary := runVariant(adm, v)
		if os.Getenv("SCENARIO_TRACE") != "" {
			fmt.Fprintf(os.Stderr, "variant %s passed in %d ms: %s\n", v.name, time.Since(start).Milliseconds(), summary)
		}
	}
	acl.Close()
	s.OK("github.com/twmb/franz-go")
}

// runVariant runs one variant (failing the run if it fails) and describes what the
// members did.
func runVariant(adm *kadm.Client, v rcVariant) string {
	topic := s.Prefix + "-" + v.name
	group := topic + "-g"
	step := func(name string) { s.Step(v.name + ": " + name) }

	step("create topic")
	ctx, cancel := stepCtx()
	created, err := adm.CreateTopics(ctx, rcPartitions, 1, nil, topic)
	cancel()
	s.Check(err, "kadm.CreateTopics "+topic)
	s.Check(created[topic].Err, "kadm.CreateTopics "+topic)

	step("produce")
	pcl := newClient(
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(20*time.Second),
		kgo.ProduceRequestTimeout(10*time.Second),
	)
	// In rounds of rcBatch records: each partition holds many small batches, and
	// the members fetch one batch per partition at a time (FetchMaxPartitionBytes),
	// so A processes part of each partition, also of those that move to B.
	ctx, cancel = stepCtx()
	for i := 0; i < rcRecords; i += rcBatch {
		recs := make([]*kgo.Record, 0, rcBatch)
		for j := i; j < i+rcBatch && j < rcRecords; j++ {
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(scen.Key(j)), Value: []byte(scen.Value(j))})
		}
		results := pcl.ProduceSync(ctx, recs...)
		s.Assert(len(results) == len(recs), "ProduceSync returned %d results, want %d", len(results), len(recs))
		for _, r := range results {
			s.Check(r.Err, "produce "+string(r.Record.Key))
		}
	}
	cancel()
	pcl.Close()

	step("list end offsets")
	ctx, cancel = stepCtx()
	ends, err := adm.ListEndOffsets(ctx, topic)
	cancel()
	s.Check(err, "kadm.ListEndOffsets")
	s.Check(ends.Error(), "kadm.ListEndOffsets")
	high := map[int32]int64{}
	total := int64(0)
	for p, eo := range ends[topic] {
		high[p] = eo.Offset
		total += eo.Offset
	}
	s.Assert(len(high) == rcPartitions && total == rcRecords,
		"end offsets %v: want %d partitions holding %d records", high, rcPartitions, rcRecords)

	done := &rcProcessed{by: map[string][]string{}}
	runCtx, stopAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer stopAll()
	var wg sync.WaitGroup
	half := make(chan struct{})
	var halfOnce sync.Once

	// A processes until it reached half of the records, then stops polling until a
	// revoke callback of its that revoked partitions committed (eager: the first,
	// while the group prepares the rebalance; cooperative: the one after it), so
	// that what it committed is exactly what it processed and the new owners must
	// start from there.
	// (A kgo client joins its group as it is created: B is created once A is done.)
	a := newRCMember(adm, v, topic, group, "A")
	var b *rcMember
	pollLoop := func(m *rcMember, pauseAtHalf bool) {
		defer wg.Done()
		paused := false
		for runCtx.Err() == nil {
			pctx, pcancel := context.WithTimeout(runCtx, time.Second)
			fetches := m.cl.PollRecords(pctx, rcPollMax)
			pcancel()
			fetches.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) &&
					!errors.Is(err, kgo.ErrClientClosed) {
					s.Failf("%s: fetch error on %s/%d: %v", m.name, t, p, err)
				}
			})
			fetches.EachRecord(func(r *kgo.Record) { m.process(done, topic, r) })
			m.cl.AllowRebalance()
			if pauseAtHalf && !paused && m.count() >= rcHalf {
				paused = true
				halfOnce.Do(func() { close(half) })
				select {
				case <-m.revoked:
				case <-runCtx.Done():
				case <-time.After(30 * time.Second):
				}
			}
		}
	}

	step("member A consumes half")
	wg.Add(1)
	go pollLoop(a, true)
	select {
	case <-half:
	case <-time.After(30 * time.Second):
		s.Failf("member A processed %d records within 30s, want >= %d", a.count(), rcHalf)
	}

	step("member B joins")
	b = newRCMember(adm, v, topic, group, "B")
	wg.Add(1)
	go pollLoop(b, false)
	select {
	case <-a.revoked:
	case <-time.After(30 * time.Second):
		s.Failf("member A's partitions were not revoked within 30s of member B joining")
	}

	step("consume the rest")
	deadline := time.Now().Add(40 * time.Second)
	for done.union() < rcRecords && time.Now().Before(deadline) {
		time.Sleep(25 * time.Millisecond)
	}
	time.Sleep(time.Second) // any extra (duplicate) record
	stopAll()
	wg.Wait()

	step("check processed records")
	done.mu.Lock()
	union, dups := len(done.by), append([]string(nil), done.dups...)
	var dupDetail []string
	for i, k := range dups { // who processed them and where, the first 20
		if i == 20 {
			dupDetail = append(dupDetail, "...")
			break
		}
		dupDetail = append(dupDetail, k+"="+strings.Join(done.by[k], ","))
	}
	done.mu.Unlock()
	for _, m := range []*rcMember{a, b} {
		m.mu.Lock()
	}
	summary := fmt.Sprintf("end offsets %v; A: processed %d %v, assigned %v, revoke callbacks %v (commit errors %v); B: processed %d %v, assigned %v, revoke callbacks %v",
		high, a.processed, a.perPart, a.assigned, a.revokes, a.revokeErrs, b.processed, b.perPart, b.assigned, b.revokes)
	for _, m := range []*rcMember{a, b} {
		m.mu.Unlock()
	}
	if len(dups) > 0 {
		sort.Strings(dups)
		s.Failf("variant %s: %d keys processed twice (the revoke callback's commit was not honored): %s; first seen %s; %s",
			v.name, len(dups), strings.Join(dups, " "), strings.Join(dupDetail, " "), summary)
	}
	s.Assert(union == rcRecords, "variant %s: processed %d distinct keys within 40s, want %d; %s", v.name, union, rcRecords, summary)
	for _, m := range []*rcMember{a, b} {
		m.mu.Lock()
		s.Assert(len(m.revokeErrs) == 0, "variant %s: %s's commit in its revoke callback failed: %v; %s",
			v.name, m.name, m.revokeErrs, summary)
		s.Assert(len(m.lost) == 0, "variant %s: %s lost partitions %v; %s", v.name, m.name, m.lost, summary)
		m.mu.Unlock()
	}
	// A's first revoke callback runs when the broker tells A that the group is
	// rebalancing (eager: revoking everything; cooperative: at the end of the
	// session, revoking nothing yet), before A rejoins: the group is preparing the
	// rebalance, and what A commits there is what it processed.
	a.mu.Lock()
	s.Assert(len(a.revokes) > 0, "variant %s: A's revoke callback never ran; %s", v.name, summary)
	s.Assert(a.processed >= rcHalf, "variant %s: A processed %d records, want >= %d; %s", v.name, a.processed, rcHalf, summary)
	first := a.revokes[0]
	s.Assert(len(first.committed) > 0, "variant %s: A's first revoke callback had nothing to commit; %s", v.name, summary)
	s.Assert(first.state == "PreparingRebalance",
		"variant %s: A's first revoke callback committed in group state %q, want PreparingRebalance; %s", v.name, first.state, summary)
	a.mu.Unlock()
	b.mu.Lock()
	s.Assert(len(b.assigned) > 0, "variant %s: B got no partitions; %s", v.name, summary)
	b.mu.Unlock()

	step("commit")
	for _, m := range []*rcMember{a, b} {
		ctx, cancel = stepCtx()
		err := m.cl.CommitUncommittedOffsets(ctx)
		cancel()
		s.Check(err, m.name+" CommitUncommittedOffsets")
	}

	step("fetch committed offsets")
	ctx, cancel = stepCtx()
	committed, err := adm.FetchOffsets(ctx, group)
	cancel()
	s.Check(err, "kadm.FetchOffsets")
	s.Check(committed.Error(), "kadm.FetchOffsets")
	got := map[int32]int64{}
	for p := range high {
		if o, ok := committed.Lookup(topic, p); ok {
			got[p] = o.At
		}
	}
	for p, h := range high {
		o, ok := got[p]
		s.Assert(ok && o == h, "variant %s: committed offsets %v, want the end offsets %v; %s", v.name, got, high, summary)
	}

	step("close group members")
	for _, m := range []*rcMember{b, a} {
		m.mu.Lock()
		m.closing = true
		m.mu.Unlock()
		ctx, cancel = stepCtx()
		err := m.cl.LeaveGroupContext(ctx)
		cancel()
		s.Check(err, m.name+" LeaveGroup")
		m.cl.Close()
	}
	return summary
}

// newRCMember creates a member's client, which joins the group right away. Its
// revoke callback commits what the member processed, as applications do (in each
// call, also the cooperative balancer's calls that revoke nothing).
func newRCMember(adm *kadm.Client, v rcVariant, topic, group, name string) *rcMember {
	m := &rcMember{name: name, perPart: map[int32]int{}, revoked: make(chan struct{})}
	revoked := func(_ context.Context, cl *kgo.Client, r map[string][]int32) {
		m.mu.Lock()
		closing := m.closing
		m.mu.Unlock()
		if closing {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rev := rcRevoke{revoked: r[topic], committed: cl.UncommittedOffsets()[topic], state: "unknown"}
		if described, err := adm.DescribeGroups(ctx, group); err != nil {
			rev.state = "unknown (" + err.Error() + ")"
		} else if d, ok := described[group]; ok && d.Err == nil {
			rev.state = d.State
		}
		err := cl.CommitUncommittedOffsets(ctx)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.revokes = append(m.revokes, rev)
		if err != nil {
			m.revokeErrs = append(m.revokeErrs, fmt.Sprintf("%v: %v", rev, err))
		}
		if len(rev.revoked) > 0 {
			if m.nRevoked++; m.nRevoked == 1 {
				close(m.revoked)
			}
		}
	}
	opts := []kgo.Opt{
		kgo.ClientID(s.Prefix + "-franz-" + v.name + "-" + name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.Balancers(v.balancer()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(6 * time.Second),
		kgo.RebalanceTimeout(10 * time.Second),
		kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.FetchMaxPartitionBytes(1), // one batch per partition and fetch
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, as map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.assigned = append(m.assigned, as[topic]...)
		}),
		kgo.OnPartitionsRevoked(revoked),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if !m.closing && len(l[topic]) > 0 {
				m.lost = append(m.lost, fmt.Sprint(l[topic]))
			}
		}),
	}
	if v.static {
		opts = append(opts, kgo.InstanceID(group+"-"+name))
	}
	m.cl = newClient(opts...)
	return m
}

func (m *rcMember) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.processed
}

// process handles one polled record: checks it is a produced one and notes that
// m processed it (a duplicate if it was processed already, by either member).
func (m *rcMember) process(t *rcProcessed, topic string, r *kgo.Record) {
	key, val := string(r.Key), string(r.Value)
	i, err := strconv.Atoi(strings.TrimPrefix(key, "k"))
	if r.Topic != topic || !strings.HasPrefix(key, "k") || err != nil || i < 0 || i >= rcRecords || val != scen.Value(i) {
		s.Failf("%s: unexpected record %s/%d@%d key %q value %q", m.name, r.Topic, r.Partition, r.Offset, key, val)
	}
	where := fmt.Sprintf("%s@%d/%d", m.name, r.Partition, r.Offset)
	t.mu.Lock()
	if len(t.by[key]) == 1 {
		t.dups = append(t.dups, key)
	}
	t.by[key] = append(t.by[key], where)
	t.mu.Unlock()
	m.mu.Lock()
	m.processed++
	m.perPart[r.Partition]++
	m.mu.Unlock()
}
