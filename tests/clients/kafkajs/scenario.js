#!/usr/bin/env node
// kafkajs conformance scenario against a running Skein broker.
//
//   node scenario.js <bootstrap host:port> <unique prefix>
//
// Admin (create/delete topics, describe configs), an idempotent acks=all producer,
// list offsets (earliest, latest, by timestamp), consumption from the beginning and from
// an offset, and a 2-member consumer group with explicit commits checked through the
// admin client. Prints `OK kafkajs <version>` and exits 0, or prints the failure to
// stderr and exits non-zero. The whole run is bounded to 120 s.
'use strict'

const { Kafka, logLevel, Partitioners, ConfigResourceTypes } = require('kafkajs')
const KAFKAJS_VERSION = require('kafkajs/package.json').version

const TOTAL_TIMEOUT_MS = 120000
const STEP_TIMEOUT_MS = 30000
const N = 100

const [bootstrap, prefix] = process.argv.slice(2)
if (!bootstrap || !prefix) {
  process.stderr.write('usage: node scenario.js <bootstrap host:port> <unique prefix>\n')
  process.exit(2)
}

let step = 'start'
const started = Date.now()
// SCENARIO_TRACE=1 prints each step's start time on stderr.
const setStep = (name) => {
  step = name
  if (process.env.SCENARIO_TRACE) process.stderr.write(`[${Date.now() - started} ms] ${name}\n`)
}
const fail = (msg) => {
  process.stderr.write(`FAIL kafkajs [${step}]: ${msg}\n`)
  process.exit(1)
}
setTimeout(() => fail(`scenario did not finish within ${TOTAL_TIMEOUT_MS} ms`), TOTAL_TIMEOUT_MS)
process.on('unhandledRejection', (e) => fail(`unhandled rejection: ${(e && e.stack) || e}`))

class AssertionError extends Error {}
const assert = (cond, msg) => {
  if (!cond) throw new AssertionError(msg)
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const withTimeout = (promise, ms, what) => {
  let timer
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms)
    }),
  ]).finally(() => clearTimeout(timer))
}
const waitFor = async (cond, ms, what) => {
  const deadline = Date.now() + ms
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`${what}: timed out after ${ms} ms`)
    await sleep(25)
  }
}

// kafkajs logs warnings and errors to stderr (stdout is reserved for the OK line).
const logCreator = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
}

const kafka = new Kafka({
  clientId: `${prefix}-kafkajs`,
  brokers: [bootstrap],
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 3, initialRetryTime: 200, maxRetryTime: 2000 },
  logLevel: logLevel.WARN,
  logCreator,
})

const topic = `${prefix}-t`
const tmpTopic = `${prefix}-tmp`
const groupId = `${prefix}-g`

const expectedKey = (i) => `k${i}`
const expectedValue = (i) => `v${i}`

// Checks that `records` ([{key, value}]) are exactly k0..k99 / v0..v99, once each.
const checkAllRecords = (records, what) => {
  assert(records.length === N, `${what}: got ${records.length} records, want ${N}`)
  const seen = new Map()
  for (const { key, value } of records) {
    assert(!seen.has(key), `${what}: key ${key} received twice`)
    seen.set(key, value)
  }
  for (let i = 0; i < N; i++) {
    assert(seen.has(expectedKey(i)), `${what}: key ${expectedKey(i)} missing`)
    const v = seen.get(expectedKey(i))
    assert(v === expectedValue(i), `${what}: key ${expectedKey(i)} has value ${v}, want ${expectedValue(i)}`)
  }
}

// Starts a group-of-its-own consumer on `topic` (from the beginning, or from the end)
// that pushes each record it receives onto `got` as {partition, offset, key, value}.
const collectingConsumer = async (groupId, fromBeginning, got) => {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 })
  await withTimeout(consumer.connect(), STEP_TIMEOUT_MS, 'consumer.connect')
  await withTimeout(consumer.subscribe({ topic, fromBeginning }), STEP_TIMEOUT_MS, 'consumer.subscribe')
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      got.push({ partition, offset: Number(message.offset), key: message.key.toString(), value: message.value.toString() })
    },
  })
  return consumer
}

const disconnectQuietly = async (c) => {
  try {
    await withTimeout(c.disconnect(), 15000, 'disconnect')
  } catch (e) {
    process.stderr.write(`warning: disconnect failed: ${e.message}\n`)
  }
}

async function main() {
  const admin = kafka.admin()
  setStep('admin connect')
  await withTimeout(admin.connect(), STEP_TIMEOUT_MS, 'admin.connect')

  // a. Admin
  setStep('create topics')
  const created = await withTimeout(
    admin.createTopics({
      waitForLeaders: true,
      timeout: 10000,
      topics: [
        { topic, numPartitions: 3, replicationFactor: 1 },
        { topic: tmpTopic, numPartitions: 1, replicationFactor: 1 },
      ],
    }),
    STEP_TIMEOUT_MS,
    'admin.createTopics'
  )
  assert(created === true, `createTopics returned ${created}, want true (topics newly created)`)
  let topics = await withTimeout(admin.listTopics(), STEP_TIMEOUT_MS, 'admin.listTopics')
  assert(topics.includes(topic), `listTopics after create lacks ${topic}: ${JSON.stringify(topics)}`)
  assert(topics.includes(tmpTopic), `listTopics after create lacks ${tmpTopic}: ${JSON.stringify(topics)}`)
  const meta = await withTimeout(admin.fetchTopicMetadata({ topics: [topic] }), STEP_TIMEOUT_MS, 'admin.fetchTopicMetadata')
  const tmeta = meta.topics.find((t) => t.name === topic)
  assert(tmeta && tmeta.partitions.length === 3, `metadata of ${topic}: ${JSON.stringify(meta)}, want 3 partitions`)
  for (const p of tmeta.partitions) {
    assert(p.partitionErrorCode === 0, `partition ${p.partitionId} of ${topic} has error code ${p.partitionErrorCode}`)
    assert(p.replicas.length === 1, `partition ${p.partitionId} has replicas ${JSON.stringify(p.replicas)}, want 1`)
  }

  setStep('delete topic')
  await withTimeout(admin.deleteTopics({ topics: [tmpTopic], timeout: 10000 }), STEP_TIMEOUT_MS, 'admin.deleteTopics')
  topics = await withTimeout(admin.listTopics(), STEP_TIMEOUT_MS, 'admin.listTopics')
  assert(!topics.includes(tmpTopic), `listTopics after delete still has ${tmpTopic}: ${JSON.stringify(topics)}`)
  assert(topics.includes(topic), `listTopics after delete lacks ${topic}`)

  setStep('describe configs')
  const dc = await withTimeout(
    admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
    }),
    STEP_TIMEOUT_MS,
    'admin.describeConfigs'
  )
  assert(dc.resources.length === 1, `describeConfigs returned ${dc.resources.length} resources, want 1`)
  const res = dc.resources[0]
  assert(res.errorCode === 0, `describeConfigs error code ${res.errorCode} (${res.errorMessage})`)
  assert(res.resourceName === topic, `describeConfigs resource name ${res.resourceName}, want ${topic}`)
  const cfg = new Map(res.configEntries.map((e) => [e.configName, e.configValue]))
  assert(cfg.get('cleanup.policy') === 'delete', `cleanup.policy is ${JSON.stringify(cfg.get('cleanup.policy'))}, want "delete"`)
  assert(cfg.has('retention.ms'), `retention.ms missing from describeConfigs: ${JSON.stringify([...cfg.keys()])}`)

  // b. Idempotent produce, acks=all
  setStep('produce')
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    // kafkajs wants unlimited retries for an idempotent producer; send() is bounded
    // by withTimeout below.
    retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 200, maxRetryTime: 2000 },
    createPartitioner: Partitioners.DefaultPartitioner,
  })
  await withTimeout(producer.connect(), STEP_TIMEOUT_MS, 'producer.connect')
  const T0 = Date.now()
  const messages = []
  for (let i = 0; i < N; i++) messages.push({ key: expectedKey(i), value: expectedValue(i) })
  const sent = await withTimeout(producer.send({ topic, acks: -1, messages }), STEP_TIMEOUT_MS, 'producer.send')
  assert(sent.length > 0, 'producer.send returned no record metadata')
  for (const m of sent) {
    assert(m.errorCode === 0, `produce to ${m.topicName}/${m.partition} failed with error code ${m.errorCode}`)
  }
  await disconnectQuietly(producer)

  // c. List offsets
  setStep('list offsets')
  const offsets = await withTimeout(admin.fetchTopicOffsets(topic), STEP_TIMEOUT_MS, 'admin.fetchTopicOffsets')
  assert(offsets.length === 3, `fetchTopicOffsets returned ${offsets.length} partitions, want 3`)
  const low = new Map()
  const high = new Map()
  let total = 0
  for (const o of offsets) {
    const l = Number(o.low)
    const h = Number(o.high)
    assert(l === 0, `partition ${o.partition}: earliest offset ${o.low}, want 0 on a new topic`)
    assert(h >= l, `partition ${o.partition}: latest ${h} < earliest ${l}`)
    low.set(o.partition, l)
    high.set(o.partition, h)
    total += h - l
  }
  assert(total === N, `sum(latest - earliest) = ${total}, want ${N} (${JSON.stringify(offsets)})`)
  const byTime = await withTimeout(
    admin.fetchTopicOffsetsByTimestamp(topic, T0),
    STEP_TIMEOUT_MS,
    'admin.fetchTopicOffsetsByTimestamp'
  )
  assert(byTime.length === 3, `fetchTopicOffsetsByTimestamp returned ${byTime.length} partitions, want 3`)
  for (const o of byTime) {
    if (high.get(o.partition) > low.get(o.partition)) {
      assert(
        Number(o.offset) === low.get(o.partition),
        `partition ${o.partition}: offset for timestamp T0=${T0} is ${o.offset}, want earliest ${low.get(o.partition)}`
      )
    }
  }

  // d. Consume from the beginning (kafkajs needs a group: a fresh one, fromBeginning)
  setStep('consume from beginning')
  {
    const got = []
    const consumer = await collectingConsumer(`${prefix}-all`, true, got)
    await waitFor(() => got.length >= N, STEP_TIMEOUT_MS, `consuming ${N} records (got ${got.length})`)
    await sleep(1000) // anything beyond the 100 records would show up here
    await disconnectQuietly(consumer)
    checkAllRecords(got, 'consume from beginning')
  }

  // d'. Consume from an offset: latest-1 of a partition with >= 2 records
  setStep('consume from offset')
  {
    const p = [...high.keys()].find((k) => high.get(k) - low.get(k) >= 2)
    assert(p !== undefined, `no partition has >= 2 records: ${JSON.stringify(offsets)}`)
    const want = high.get(p) - 1
    const got = []
    // Not fromBeginning: the other partitions start at the end and give nothing.
    const consumer = await collectingConsumer(`${prefix}-seek`, false, got)
    consumer.seek({ topic, partition: p, offset: String(want) })
    await waitFor(() => got.length >= 1, STEP_TIMEOUT_MS, `consuming from offset ${want} of partition ${p}`)
    await sleep(1000)
    await disconnectQuietly(consumer)
    assert(got.length === 1, `consume from ${topic}/${p}@${want}: got ${got.length} records ${JSON.stringify(got)}, want 1`)
    assert(got[0].partition === p && got[0].offset === want, `consume from offset: got ${JSON.stringify(got[0])}, want ${topic}/${p}@${want}`)
    const idx = Number(got[0].key.slice(1))
    assert(got[0].key === expectedKey(idx) && got[0].value === expectedValue(idx), `consume from offset: bad record ${JSON.stringify(got[0])}`)
  }

  // e. A 2-member consumer group, explicit commits
  setStep('consumer group')
  {
    const members = [0, 1].map((i) => ({
      name: `member${i}`,
      consumer: kafka.consumer({
        groupId,
        sessionTimeout: 10000,
        rebalanceTimeout: 10000,
        heartbeatInterval: 500,
        maxWaitTimeInMs: 500,
      }),
      got: [],
      assignment: null,
      generations: [],
      last: new Map(), // partition -> last offset consumed
    }))
    for (const m of members) {
      m.consumer.on(m.consumer.events.GROUP_JOIN, (e) => {
        m.generations.push(e.payload.memberId)
        m.assignment = e.payload.memberAssignment[topic] || []
      })
      m.consumer.on(m.consumer.events.CRASH, (e) => fail(`${m.name} crashed: ${e.payload.error && e.payload.error.stack}`))
      await withTimeout(m.consumer.connect(), STEP_TIMEOUT_MS, `${m.name} connect`)
      await withTimeout(m.consumer.subscribe({ topic, fromBeginning: true }), STEP_TIMEOUT_MS, `${m.name} subscribe`)
    }
    // Start both members together so that they join the same first generation.
    await Promise.all(
      members.map((m) =>
        m.consumer.run({
          autoCommit: false,
          eachMessage: async ({ partition, message }) => {
            const off = Number(message.offset)
            m.got.push({ partition, offset: off, key: message.key.toString(), value: message.value.toString() })
            m.last.set(partition, off)
          },
        })
      )
    )
    const union = () => members[0].got.length + members[1].got.length
    await waitFor(() => union() >= N, 45000, `group consuming ${N} records (got ${union()})`)
    await sleep(1000)
    for (const m of members) {
      assert(m.assignment && m.assignment.length > 0, `${m.name} got no partitions (assignment ${JSON.stringify(m.assignment)})`)
      assert(m.generations.length === 1, `${m.name} joined ${m.generations.length} times: the group rebalanced during the run`)
    }
    const a0 = new Set(members[0].assignment)
    assert(
      members[1].assignment.every((p) => !a0.has(p)) && a0.size + members[1].assignment.length === 3,
      `assignments overlap or miss partitions: ${JSON.stringify(members.map((m) => m.assignment))}`
    )
    checkAllRecords([...members[0].got, ...members[1].got], 'consumer group')
    for (const m of members) {
      for (const r of m.got) {
        assert(m.assignment.includes(r.partition), `${m.name} received partition ${r.partition} outside its assignment`)
      }
    }

    // Commit explicitly: each member commits its position on each assigned partition
    // (the offset after the last record consumed; the start, 0, of an empty one).
    for (const m of members) {
      const toCommit = m.assignment.map((partition) => ({
        topic,
        partition,
        offset: String(m.last.has(partition) ? m.last.get(partition) + 1 : low.get(partition)),
      }))
      await withTimeout(m.consumer.commitOffsets(toCommit), STEP_TIMEOUT_MS, `${m.name} commitOffsets`)
    }

    setStep('fetch committed offsets')
    const committed = await withTimeout(admin.fetchOffsets({ groupId, topics: [topic] }), STEP_TIMEOUT_MS, 'admin.fetchOffsets')
    const tc = committed.find((t) => t.topic === topic)
    assert(tc, `fetchOffsets has no entry for ${topic}: ${JSON.stringify(committed)}`)
    assert(tc.partitions.length === 3, `fetchOffsets returned ${tc.partitions.length} partitions, want 3`)
    for (const { partition, offset } of tc.partitions) {
      const h = high.get(partition)
      assert(Number(offset) === h, `partition ${partition}: committed offset ${offset}, want latest ${h}`)
    }

    setStep('close group members')
    for (const m of members) {
      await withTimeout(m.consumer.disconnect(), STEP_TIMEOUT_MS, `${m.name} disconnect`)
    }
  }

  setStep('admin disconnect')
  await withTimeout(admin.disconnect(), STEP_TIMEOUT_MS, 'admin.disconnect')
  process.stdout.write(`OK kafkajs ${KAFKAJS_VERSION}\n`)
  process.exit(0)
}

main().catch((e) => fail(e instanceof AssertionError ? e.message : (e && e.stack) || String(e)))
