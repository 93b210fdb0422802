// Command franz is the franz-go (kgo + kadm) conformance scenario against a running
// Skein broker:
//
//	franz <bootstrap host:port> <unique prefix>
//	franz revoke-commit <bootstrap host:port> <unique prefix>
//	franz share <bootstrap host:port> <unique prefix>
//
// The second form is the revoke-commit scenario (see revoke.go), the third the
// share-group scenario (see share.go).
//
// Admin (create/delete topics, describe configs), an idempotent acks=all producer,
// list offsets (start, end, after a time), group-less consumption from the start and
// from an offset, and a 2-member consumer group with explicit commits checked through
// kadm. Prints `OK franz-go <version>` and exits 0, or prints the failure to stderr and
// exits non-zero. The whole run is bounded to 120 s.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"skein/clients/internal/scen"
)

const stepTimeout = 30 * time.Second

var s *scen.Scenario

func stepCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), stepTimeout)
}

func newClient(opts ...kgo.Opt) *kgo.Client {
	base := []kgo.Opt{
		kgo.SeedBrokers(s.Bootstrap),
		kgo.ClientID(s.Prefix + "-franz"),
		kgo.DialTimeout(5 * time.Second),
		kgo.RequestTimeoutOverhead(10 * time.Second),
		kgo.RetryTimeout(15 * time.Second),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, logLevel(), nil)),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	s.Check(err, "kgo.NewClient")
	return cl
}

// logLevel is kgo's log level: warnings, or what SCENARIO_KGO_LOG names
// (debug, info, warn, error).
func logLevel() kgo.LogLevel {
	switch os.Getenv("SCENARIO_KGO_LOG") {
	case "debug":
		return kgo.LogLevelDebug
	case "info":
		return kgo.LogLevelInfo
	case "error":
		return kgo.LogLevelError
	default:
		return kgo.LogLevelWarn
	}
}

func toRecord(r *kgo.Record) scen.Record {
	return scen.Record{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)}
}

// consume polls cl until want records arrived, then one more second for any extra.
func consume(cl *kgo.Client, want int, what string) []scen.Record {
	var got []scen.Record
	deadline := time.Now().Add(stepTimeout)
	var settle time.Time
	for {
		now := time.Now()
		if len(got) >= want && settle.IsZero() {
			settle = now.Add(time.Second)
		}
		end := deadline
		if !settle.IsZero() {
			end = settle
		}
		if !now.Before(end) {
			break
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		fetches := cl.PollFetches(ctx)
		cancel()
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				s.Failf("%s: fetch error on %s/%d: %v", what, t, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, toRecord(r)) })
	}
	s.Assert(len(got) >= want, "%s: got %d records within %s, want %d", what, len(got), stepTimeout, want)
	return got
}

type member struct {
	scen.Member
	cl      *kgo.Client
	assigns int // OnPartitionsAssigned calls
	revokes int // OnPartitionsRevoked/Lost calls before close
	closing bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "revoke-commit" {
		revokeCommit()
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "share" {
		shareScenario()
		return
	}
	s = scen.Start("franz-go")
	topic, tmpTopic, group := s.Topic, s.TmpTopic, s.Group

	acl := newClient()
	adm := kadm.NewClient(acl)

	// a. Admin
	s.Step("create topics")
	ctx, cancel := stepCtx()
	created, err := adm.CreateTopics(ctx, 3, 1, nil, topic)
	s.Check(err, "kadm.CreateTopics "+topic)
	s.Check(created[topic].Err, "kadm.CreateTopics "+topic)
	created, err = adm.CreateTopics(ctx, 1, 1, nil, tmpTopic)
	s.Check(err, "kadm.CreateTopics "+tmpTopic)
	s.Check(created[tmpTopic].Err, "kadm.CreateTopics "+tmpTopic)
	topics, err := adm.ListTopics(ctx)
	s.Check(err, "kadm.ListTopics")
	cancel()
	td, ok := topics[topic]
	s.Assert(ok, "ListTopics after create lacks %s: %v", topic, topics.Names())
	s.Check(td.Err, "metadata of "+topic)
	s.Assert(len(td.Partitions) == 3, "%s has %d partitions, want 3", topic, len(td.Partitions))
	for _, pd := range td.Partitions {
		s.Check(pd.Err, fmt.Sprintf("metadata of %s/%d", topic, pd.Partition))
		s.Assert(len(pd.Replicas) == 1, "%s/%d has replicas %v, want 1", topic, pd.Partition, pd.Replicas)
	}
	s.Assert(topics.Has(tmpTopic), "ListTopics after create lacks %s: %v", tmpTopic, topics.Names())

	s.Step("delete topic")
	ctx, cancel = stepCtx()
	deleted, err := adm.DeleteTopics(ctx, tmpTopic)
	s.Check(err, "kadm.DeleteTopics")
	s.Check(deleted[tmpTopic].Err, "kadm.DeleteTopics "+tmpTopic)
	// kadm.ListTopics answers from kgo's metadata cache (MetadataMinAge, 5 s), which
	// still holds the topic: ask the broker itself with a fresh Metadata request.
	live := listTopicsFresh(ctx, acl)
	cancel()
	s.Assert(!live[tmpTopic], "Metadata (all topics) after delete still lists %s: %v", tmpTopic, live)
	s.Assert(live[topic], "Metadata (all topics) after delete lacks %s: %v", topic, live)

	s.Step("describe configs")
	ctx, cancel = stepCtx()
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	cancel()
	s.Check(err, "kadm.DescribeTopicConfigs")
	s.Assert(len(rcs) == 1, "DescribeTopicConfigs returned %d resources, want 1", len(rcs))
	s.Check(rcs[0].Err, "DescribeTopicConfigs "+topic+" "+rcs[0].ErrMessage)
	s.Assert(rcs[0].Name == topic, "DescribeTopicConfigs resource %q, want %q", rcs[0].Name, topic)
	cfg := map[string]*string{}
	for _, c := range rcs[0].Configs {
		cfg[c.Key] = c.Value
	}
	cp, ok := cfg["cleanup.policy"]
	s.Assert(ok && cp != nil && *cp == "delete", "cleanup.policy is %v, want delete", describe(cp, ok))
	_, ok = cfg["retention.ms"]
	s.Assert(ok, "retention.ms missing from DescribeTopicConfigs (%d configs)", len(cfg))

	// b. Produce (franz-go is idempotent by default; acks=all is required for it)
	s.Step("produce")
	pcl := newClient(
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(20*time.Second),
		kgo.ProduceRequestTimeout(10*time.Second),
	)
	t0 := time.Now().UnixMilli()
	recs := make([]*kgo.Record, scen.N)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(scen.Key(i)), Value: []byte(scen.Value(i))}
	}
	ctx, cancel = stepCtx()
	results := pcl.ProduceSync(ctx, recs...)
	cancel()
	s.Assert(len(results) == scen.N, "ProduceSync returned %d results, want %d", len(results), scen.N)
	for _, r := range results {
		s.Check(r.Err, "produce "+string(r.Record.Key))
		s.Assert(r.Record.Offset >= 0, "produce %s: offset %d", r.Record.Key, r.Record.Offset)
		s.Assert(r.Record.ProducerID >= 0, "produce %s: no producer id (%d): not idempotent", r.Record.Key, r.Record.ProducerID)
	}
	pcl.Close()

	// c. List offsets
	s.Step("list offsets")
	ctx, cancel = stepCtx()
	starts, err := adm.ListStartOffsets(ctx, topic)
	s.Check(err, "kadm.ListStartOffsets")
	s.Check(starts.Error(), "kadm.ListStartOffsets")
	ends, err := adm.ListEndOffsets(ctx, topic)
	s.Check(err, "kadm.ListEndOffsets")
	s.Check(ends.Error(), "kadm.ListEndOffsets")
	after, err := adm.ListOffsetsAfterMilli(ctx, t0, topic)
	s.Check(err, "kadm.ListOffsetsAfterMilli")
	s.Check(after.Error(), "kadm.ListOffsetsAfterMilli")
	cancel()
	s.Assert(len(starts[topic]) == 3 && len(ends[topic]) == 3 && len(after[topic]) == 3,
		"listed offsets for %d/%d/%d partitions, want 3", len(starts[topic]), len(ends[topic]), len(after[topic]))
	low := map[int32]int64{}
	high := map[int32]int64{}
	total := int64(0)
	for p, so := range starts[topic] {
		eo, ok := ends[topic][p]
		s.Assert(ok, "no end offset for partition %d", p)
		s.Assert(so.Offset == 0, "partition %d: start offset %d, want 0 on a new topic", p, so.Offset)
		s.Assert(eo.Offset >= so.Offset, "partition %d: end %d < start %d", p, eo.Offset, so.Offset)
		low[p], high[p] = so.Offset, eo.Offset
		total += eo.Offset - so.Offset
	}
	s.Assert(total == scen.N, "sum(end - start) = %d, want %d (start %v end %v)", total, scen.N, low, high)
	for p, ao := range after[topic] {
		if high[p] > low[p] {
			s.Assert(ao.Offset == low[p], "partition %d: offset after T0=%d is %d, want start %d", p, t0, ao.Offset, low[p])
		}
	}

	// d. Consume from the start without a group
	s.Step("consume from start")
	all := map[int32]kgo.Offset{}
	for p := range low {
		all[p] = kgo.NewOffset().AtStart()
	}
	ccl := newClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: all}), kgo.FetchMaxWait(500*time.Millisecond))
	got := consume(ccl, scen.N, "consume from start")
	ccl.Close()
	s.CheckAll(got, "consume from start")

	s.Step("consume from offset")
	p := s.SeekPartition(low, high, "start", "end")
	want := high[p] - 1
	ocl := newClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(want)}}),
		kgo.FetchMaxWait(500*time.Millisecond))
	got = consume(ocl, 1, "consume from offset")
	ocl.Close()
	s.CheckFromOffset(got, topic, p, want)

	// e. A 2-member consumer group, explicit commits
	s.Step("consumer group")
	members := []*member{{Member: scen.NewMember("member0")}, {Member: scen.NewMember("member1")}}
	for _, m := range members {
		m := m
		revoked := func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			m.Mu.Lock()
			defer m.Mu.Unlock()
			if !m.closing && len(r[topic]) > 0 {
				m.revokes++
			}
		}
		m.cl = newClient(
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(),
			kgo.SessionTimeout(10*time.Second),
			kgo.RebalanceTimeout(10*time.Second),
			kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.FetchMaxWait(500*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				m.Mu.Lock()
				defer m.Mu.Unlock()
				m.assigns++
				m.Assigned = append(m.Assigned, a[topic]...)
			}),
			kgo.OnPartitionsRevoked(revoked),
			kgo.OnPartitionsLost(revoked),
		)
	}
	pollCtx, stopPolling := context.WithCancel(context.Background())
	waitPolling := scen.GoEach(members, func(m *member) {
		for pollCtx.Err() == nil {
			fetches := m.cl.PollFetches(pollCtx)
			fetches.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
					s.Failf("%s: fetch error on %s/%d: %v", m.Name, t, p, err)
				}
			})
			m.Mu.Lock()
			fetches.EachRecord(func(r *kgo.Record) { m.Consumed(toRecord(r)) })
			m.Mu.Unlock()
		}
	})
	bases := []*scen.Member{&members[0].Member, &members[1].Member}
	s.WaitConsumed(bases)
	stopPolling()
	waitPolling()
	s.CheckGroup(bases, func(i int) {
		m := members[i]
		s.Assert(len(m.Assigned) > 0, "%s got no partitions", m.Name)
		s.Assert(m.assigns == 1 && m.revokes == 0,
			"%s: %d assignments and %d revocations: the group rebalanced during the run", m.Name, m.assigns, m.revokes)
	})

	// Commit explicitly: each member commits its position on each assigned partition
	// (after the last record consumed; the start of an empty one).
	s.Step("commit")
	for _, m := range members {
		offsets := map[int32]kgo.EpochOffset{}
		for _, q := range m.Assigned {
			at := low[q]
			if o, ok := m.Last[q]; ok {
				at = o + 1
			}
			offsets[q] = kgo.EpochOffset{Epoch: -1, Offset: at}
		}
		ctx, cancel = stepCtx()
		var commitErr error
		m.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: offsets},
			func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				if err != nil {
					commitErr = err
					return
				}
				for _, t := range resp.Topics {
					for _, pr := range t.Partitions {
						if e := kerr.ErrorForCode(pr.ErrorCode); e != nil && commitErr == nil {
							commitErr = fmt.Errorf("%s/%d: %w", t.Topic, pr.Partition, e)
						}
					}
				}
			})
		cancel()
		s.Check(commitErr, m.Name+" CommitOffsetsSync")
	}

	s.Step("fetch committed offsets")
	ctx, cancel = stepCtx()
	committed, err := adm.FetchOffsets(ctx, group)
	cancel()
	s.Check(err, "kadm.FetchOffsets")
	s.Check(committed.Error(), "kadm.FetchOffsets")
	s.Assert(len(committed[topic]) == 3, "FetchOffsets returned %d partitions of %s, want 3: %v", len(committed[topic]), topic, committed)
	for q, h := range high {
		o, ok := committed.Lookup(topic, q)
		s.Assert(ok, "no committed offset for partition %d", q)
		s.Assert(o.At == h, "partition %d: committed offset %d, want end offset %d", q, o.At, h)
	}

	s.Step("close group members")
	for _, m := range members {
		m.Mu.Lock()
		m.closing = true
		m.Mu.Unlock()
		ctx, cancel = stepCtx()
		err := m.cl.LeaveGroupContext(ctx)
		cancel()
		s.Check(err, m.Name+" LeaveGroup")
		m.cl.Close()
	}
	acl.Close()
	s.OK("github.com/twmb/franz-go")
}

// listTopicsFresh asks the broker for all topics, bypassing kgo's metadata cache.
func listTopicsFresh(ctx context.Context, cl *kgo.Client) map[string]bool {
	req := kmsg.NewPtrMetadataRequest() // nil Topics: all topics
	resp, err := req.RequestWith(ctx, cl)
	s.Check(err, "Metadata request")
	names := map[string]bool{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			names[*t.Topic] = true
		}
	}
	return names
}

func describe(v *string, ok bool) string {
	switch {
	case !ok:
		return "missing"
	case v == nil:
		return "null"
	default:
		return fmt.Sprintf("%q", *v)
	}
}
