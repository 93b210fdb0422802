// Command sarama is the IBM/sarama conformance scenario against a running Skein
// broker:
//
//	sarama <bootstrap host:port> <unique prefix>
//
// Admin (create/delete topics, describe configs), an idempotent acks=all producer,
// list offsets (oldest, newest, by time), group-less consumption from the oldest offset
// and from an offset, and a 2-member consumer group with explicit commits checked
// through ClusterAdmin. Prints `OK sarama <version>` and exits 0, or prints the failure
// to stderr and exits non-zero. The whole run is bounded to 120 s. SARAMA_LOG=1 sends
// sarama's own log to stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"skein/clients/internal/scen"
)

const stepTimeout = 30 * time.Second

var s *scen.Scenario

func newConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.MaxVersion
	c.ClientID = s.Prefix + "-sarama"
	c.Net.DialTimeout = 5 * time.Second
	c.Net.ReadTimeout = 15 * time.Second
	c.Net.WriteTimeout = 15 * time.Second
	c.Metadata.Retry.Max = 5
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	c.Admin.Timeout = 10 * time.Second
	c.Admin.Retry.Max = 5
	c.Consumer.MaxWaitTime = 500 * time.Millisecond
	c.Consumer.Return.Errors = true
	return c
}

// within runs fn and fails the scenario if it takes longer than stepTimeout:
// a sarama call that hangs must not hang the run.
func within(what string, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(stepTimeout):
		s.Failf("%s: timed out after %s", what, stepTimeout)
	}
}

func toRecord(m *sarama.ConsumerMessage) scen.Record {
	return scen.Record{Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: string(m.Value)}
}

// drain reads pcs until want records arrived in total, then one more second for
// any extra.
func drain(pcs []sarama.PartitionConsumer, want int, what string) []scen.Record {
	msgs := make(chan *sarama.ConsumerMessage)
	errs := make(chan *sarama.ConsumerError)
	stop := make(chan struct{})
	wait := scen.GoEach(pcs, func(pc sarama.PartitionConsumer) {
		for more := true; more; {
			select {
			case m, ok := <-pc.Messages():
				more = ok && forward(m, msgs, stop)
			case e, ok := <-pc.Errors():
				more = ok && forward(e, errs, stop)
			case <-stop:
				more = false
			}
		}
	})
	defer func() { close(stop); wait() }()
	var got []scen.Record
	deadline := time.After(stepTimeout)
	var settle <-chan time.Time
	for {
		select {
		case m := <-msgs:
			got = append(got, toRecord(m))
			if len(got) >= want && settle == nil {
				settle = time.After(time.Second)
			}
		case e := <-errs:
			s.Failf("%s: consumer error: %v", what, e)
		case <-settle:
			return got
		case <-deadline:
			s.Failf("%s: got %d records within %s, want %d", what, len(got), stepTimeout, want)
		}
	}
}

// forward sends v on out, unless stop is closed first; it says whether it sent v.
func forward[T any](v T, out chan<- T, stop <-chan struct{}) bool {
	select {
	case out <- v:
		return true
	case <-stop:
		return false
	}
}

type member struct {
	scen.Member // Assigned: the partitions claimed in the current session
	group       sarama.ConsumerGroup
	setups      int
	session     sarama.ConsumerGroupSession
}

func (m *member) Setup(sess sarama.ConsumerGroupSession) error {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.setups++
	m.session = sess
	m.Assigned = nil
	for _, ps := range sess.Claims() {
		m.Assigned = append(m.Assigned, ps...)
	}
	sort.Slice(m.Assigned, func(i, j int) bool { return m.Assigned[i] < m.Assigned[j] })
	return nil
}

func (m *member) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (m *member) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			m.Mu.Lock()
			m.Consumed(toRecord(msg))
			m.Mu.Unlock()
			sess.MarkMessage(msg, "")
		case <-sess.Context().Done():
			return nil
		}
	}
}

func main() {
	s = scen.Start("sarama")
	if os.Getenv("SARAMA_LOG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
		sarama.DebugLogger = sarama.Logger
	}
	topic, tmpTopic, group := s.Topic, s.TmpTopic, s.Group
	brokers := []string{s.Bootstrap}

	var client sarama.Client
	var admin sarama.ClusterAdmin
	var err error
	within("sarama.NewClient", func() { client, err = sarama.NewClient(brokers, newConfig()) })
	s.Check(err, "sarama.NewClient")
	within("sarama.NewClusterAdmin", func() { admin, err = sarama.NewClusterAdmin(brokers, newConfig()) })
	s.Check(err, "sarama.NewClusterAdmin")

	// a. Admin
	s.Step("create topics")
	within("ClusterAdmin.CreateTopic", func() {
		err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false)
	})
	s.Check(err, "ClusterAdmin.CreateTopic "+topic)
	within("ClusterAdmin.CreateTopic", func() {
		err = admin.CreateTopic(tmpTopic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false)
	})
	s.Check(err, "ClusterAdmin.CreateTopic "+tmpTopic)
	var topics map[string]sarama.TopicDetail
	within("ClusterAdmin.ListTopics", func() { topics, err = admin.ListTopics() })
	s.Check(err, "ClusterAdmin.ListTopics")
	td, ok := topics[topic]
	s.Assert(ok, "ListTopics after create lacks %s: %v", topic, names(topics))
	s.Assert(td.NumPartitions == 3, "%s has %d partitions, want 3", topic, td.NumPartitions)
	s.Assert(td.ReplicationFactor == 1, "%s has replication factor %d, want 1", topic, td.ReplicationFactor)
	_, ok = topics[tmpTopic]
	s.Assert(ok, "ListTopics after create lacks %s: %v", tmpTopic, names(topics))

	s.Step("delete topic")
	within("ClusterAdmin.DeleteTopic", func() { err = admin.DeleteTopic(tmpTopic) })
	s.Check(err, "ClusterAdmin.DeleteTopic "+tmpTopic)
	within("ClusterAdmin.ListTopics", func() { topics, err = admin.ListTopics() })
	s.Check(err, "ClusterAdmin.ListTopics")
	_, ok = topics[tmpTopic]
	s.Assert(!ok, "ListTopics after delete still has %s: %v", tmpTopic, names(topics))
	_, ok = topics[topic]
	s.Assert(ok, "ListTopics after delete lacks %s", topic)

	s.Step("describe configs")
	var entries []sarama.ConfigEntry
	within("ClusterAdmin.DescribeConfig", func() {
		entries, err = admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	})
	s.Check(err, "ClusterAdmin.DescribeConfig "+topic)
	cfg := map[string]string{}
	for _, e := range entries {
		cfg[e.Name] = e.Value
	}
	cp, ok := cfg["cleanup.policy"]
	s.Assert(ok && cp == "delete", "cleanup.policy is %q (present %v), want delete", cp, ok)
	_, ok = cfg["retention.ms"]
	s.Assert(ok, "retention.ms missing from DescribeConfig (%d entries)", len(entries))

	// b. Idempotent produce, acks=all
	s.Step("produce")
	pcfg := newConfig()
	pcfg.Producer.Idempotent = true
	pcfg.Net.MaxOpenRequests = 1
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	pcfg.Producer.Retry.Max = 5
	pcfg.Producer.Retry.Backoff = 200 * time.Millisecond
	pcfg.Producer.Timeout = 10 * time.Second
	pcfg.Producer.Return.Successes = true
	pcfg.Producer.Return.Errors = true
	var producer sarama.SyncProducer
	within("sarama.NewSyncProducer", func() { producer, err = sarama.NewSyncProducer(brokers, pcfg) })
	s.Check(err, "sarama.NewSyncProducer")
	t0 := time.Now().UnixMilli()
	msgs := make([]*sarama.ProducerMessage, scen.N)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(scen.Key(i)), Value: sarama.StringEncoder(scen.Value(i))}
	}
	within("SyncProducer.SendMessages", func() { err = producer.SendMessages(msgs) })
	var perrs sarama.ProducerErrors
	if errors.As(err, &perrs) && len(perrs) > 0 {
		s.Failf("SendMessages: %d of %d failed, first: %v", len(perrs), len(msgs), perrs[0].Err)
	}
	s.Check(err, "SyncProducer.SendMessages")
	for _, m := range msgs {
		s.Assert(m.Offset >= 0, "produce %v: no offset (%d)", m.Key, m.Offset)
	}
	within("SyncProducer.Close", func() { err = producer.Close() })
	s.Check(err, "SyncProducer.Close")

	// c. List offsets
	s.Step("list offsets")
	var parts []int32
	within("Client.RefreshMetadata", func() { err = client.RefreshMetadata(topic) })
	s.Check(err, "Client.RefreshMetadata")
	parts, err = client.Partitions(topic)
	s.Check(err, "Client.Partitions")
	s.Assert(len(parts) == 3, "%s has %d partitions, want 3", topic, len(parts))
	low := map[int32]int64{}
	high := map[int32]int64{}
	total := int64(0)
	for _, p := range parts {
		var lo, hi, at int64
		within("Client.GetOffset", func() {
			lo, err = client.GetOffset(topic, p, sarama.OffsetOldest)
			s.Check(err, fmt.Sprintf("GetOffset(%s/%d, OffsetOldest)", topic, p))
			hi, err = client.GetOffset(topic, p, sarama.OffsetNewest)
			s.Check(err, fmt.Sprintf("GetOffset(%s/%d, OffsetNewest)", topic, p))
			at, err = client.GetOffset(topic, p, t0)
			s.Check(err, fmt.Sprintf("GetOffset(%s/%d, T0=%d)", topic, p, t0))
		})
		s.Assert(lo == 0, "partition %d: oldest offset %d, want 0 on a new topic", p, lo)
		s.Assert(hi >= lo, "partition %d: newest %d < oldest %d", p, hi, lo)
		if hi > lo {
			s.Assert(at == lo, "partition %d: offset for T0=%d is %d, want oldest %d", p, t0, at, lo)
		}
		low[p], high[p] = lo, hi
		total += hi - lo
	}
	s.Assert(total == scen.N, "sum(newest - oldest) = %d, want %d (oldest %v newest %v)", total, scen.N, low, high)

	// d. Consume from the oldest offset without a group
	s.Step("consume from oldest")
	var consumer sarama.Consumer
	within("sarama.NewConsumer", func() { consumer, err = sarama.NewConsumer(brokers, newConfig()) })
	s.Check(err, "sarama.NewConsumer")
	var pcs []sarama.PartitionConsumer
	for _, p := range parts {
		var pc sarama.PartitionConsumer
		within("Consumer.ConsumePartition", func() { pc, err = consumer.ConsumePartition(topic, p, sarama.OffsetOldest) })
		s.Check(err, fmt.Sprintf("ConsumePartition(%s/%d, OffsetOldest)", topic, p))
		pcs = append(pcs, pc)
	}
	got := drain(pcs, scen.N, "consume from oldest")
	for _, pc := range pcs {
		within("PartitionConsumer.Close", func() { err = pc.Close() })
		s.Check(err, "PartitionConsumer.Close")
	}
	s.CheckAll(got, "consume from oldest")

	s.Step("consume from offset")
	p := s.SeekPartition(low, high, "oldest", "newest")
	want := high[p] - 1
	var pc sarama.PartitionConsumer
	within("Consumer.ConsumePartition", func() { pc, err = consumer.ConsumePartition(topic, p, want) })
	s.Check(err, fmt.Sprintf("ConsumePartition(%s/%d, %d)", topic, p, want))
	got = drain([]sarama.PartitionConsumer{pc}, 1, "consume from offset")
	within("PartitionConsumer.Close", func() { err = pc.Close() })
	s.Check(err, "PartitionConsumer.Close")
	within("Consumer.Close", func() { err = consumer.Close() })
	s.Check(err, "Consumer.Close")
	s.CheckFromOffset(got, topic, p, want)

	// e. A 2-member consumer group, explicit commits
	s.Step("consumer group")
	members := []*member{{Member: scen.NewMember("member0")}, {Member: scen.NewMember("member1")}}
	for _, m := range members {
		gcfg := newConfig()
		gcfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		gcfg.Consumer.Offsets.AutoCommit.Enable = false
		gcfg.Consumer.Group.Session.Timeout = 10 * time.Second
		gcfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
		gcfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
		// The default backoff after a failed join (e.g. COORDINATOR_LOAD_IN_PROGRESS
		// while __consumer_offsets is first loaded) is 2 s: a member retrying that late
		// misses the group's first generation and forces a rebalance.
		gcfg.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
		var g sarama.ConsumerGroup
		within("sarama.NewConsumerGroup", func() { g, err = sarama.NewConsumerGroup(brokers, group, gcfg) })
		s.Check(err, "sarama.NewConsumerGroup "+m.Name)
		m.group = g
	}
	ctx, stopConsuming := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, m := range members {
		m := m
		go func() {
			for e := range m.group.Errors() {
				s.Failf("%s: consumer group error: %v", m.Name, e)
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := m.group.Consume(ctx, []string{topic}, m); err != nil {
					if errors.Is(err, sarama.ErrClosedConsumerGroup) || ctx.Err() != nil {
						return
					}
					s.Failf("%s: ConsumerGroup.Consume: %v", m.Name, err)
				}
			}
		}()
	}
	bases := []*scen.Member{&members[0].Member, &members[1].Member}
	s.WaitConsumed(bases)
	s.CheckGroup(bases, func(i int) {
		m := members[i]
		s.Assert(len(m.Assigned) > 0, "%s got no partitions (%d sessions; records per member %d/%d)", m.Name, m.setups, len(members[0].Got), len(members[1].Got))
		s.Assert(m.setups == 1, "%s: %d sessions: the group rebalanced during the run", m.Name, m.setups)
	})

	// Commit explicitly: consumed records are marked; an empty claimed partition
	// is marked at its start. Commit errors arrive on Errors() (checked above).
	s.Step("commit")
	for _, m := range members {
		m.Mu.Lock()
		sess := m.session
		for _, q := range m.Assigned {
			if _, ok := m.Last[q]; !ok {
				sess.MarkOffset(topic, q, low[q], "")
			}
		}
		m.Mu.Unlock()
		within(m.Name+" ConsumerGroupSession.Commit", sess.Commit)
	}

	s.Step("fetch committed offsets")
	var ofr *sarama.OffsetFetchResponse
	within("ClusterAdmin.ListConsumerGroupOffsets", func() {
		ofr, err = admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	})
	s.Check(err, "ClusterAdmin.ListConsumerGroupOffsets")
	s.Assert(ofr.Err == sarama.ErrNoError, "ListConsumerGroupOffsets: error %v", ofr.Err)
	for _, q := range parts {
		b := ofr.GetBlock(topic, q)
		s.Assert(b != nil, "ListConsumerGroupOffsets has no block for %s/%d", topic, q)
		s.Assert(b.Err == sarama.ErrNoError, "ListConsumerGroupOffsets %s/%d: error %v", topic, q, b.Err)
		s.Assert(b.Offset == high[q], "partition %d: committed offset %d, want newest %d", q, b.Offset, high[q])
	}

	s.Step("close group members")
	stopConsuming()
	within("consumer group sessions ending", wg.Wait)
	for _, m := range members {
		within(m.Name+" ConsumerGroup.Close", func() { err = m.group.Close() })
		s.Check(err, m.Name+" ConsumerGroup.Close")
	}
	within("ClusterAdmin.Close", func() { err = admin.Close() })
	s.Check(err, "ClusterAdmin.Close")
	within("Client.Close", func() { err = client.Close() })
	s.Check(err, "Client.Close")
	s.OK("github.com/IBM/sarama")
}

func names(m map[string]sarama.TopicDetail) []string {
	var ns []string
	for n := range m {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}
