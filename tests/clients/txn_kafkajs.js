#!/usr/bin/env node
/*
 * Inlet's Kafka transactions with kafkajs (pure JavaScript) as an independent client.
 *
 * Usage: NODE_PATH=DIR/node_modules node txn_kafkajs.js BOOTSTRAP [PREFIX]
 *
 * kafkajs speaks the old versions of the transaction APIs (InitProducerId, EndTxn and the rest
 * below KIP-588's), so a fenced producer must hear INVALID_PRODUCER_EPOCH there: kafkajs 2.2.4
 * does not know PRODUCER_FENCED. Its sendOffsets carries the group id alone (no member or
 * generation), and its consumers always join a group (each reader here has its own).
 *
 * PREFIX (default: one from the process id) starts every topic, group and transactional id, so
 * that reruns against one node do not meet. Each case creates its own topics (3 partitions)
 * with the admin client:
 *
 *   a. commit, abort, commit across 3 partitions with producer.transaction(): a consumer with
 *      readUncommitted: false sees exactly the committed records, in each partition's order;
 *      readUncommitted: true sees the aborted ones too (and never a control record). kafkajs
 *      has no position or end offset at an isolation level, so "exactly" is: the expected
 *      records arrived, and nothing more within a quiet second after them.
 *   b. an open transaction holds read_committed back: its records and a later
 *      non-transactional record in the same partition stay invisible to a read_committed
 *      consumer (watched for a bounded time once it has fetched) while read_uncommitted sees
 *      both; after the commit read_committed sees both.
 *   c. read-process-write: a group consumer's input goes transformed to an output topic with
 *      sendOffsets({consumerGroupId, topics}) in the transaction; admin.fetchOffsets shows the
 *      processed positions after a commit and the earlier ones after an abort; after seeking
 *      back and committing again the output holds every input record exactly once.
 *   d. zombie fencing: a second producer with the same transactionalId fences the first (its
 *      next send and its commit fail with INVALID_PRODUCER_EPOCH), aborts its open transaction,
 *      and commits normally.
 *   e. transaction timeout (transactionTimeout: 3000): the broker aborts an idle transaction,
 *      read_committed reads past it within 20 s, and the timed-out producer's commit fails.
 *
 * Every step prints what it checked; the first mismatch exits with status 1 and a message naming
 * it. The last line is OK.
 */
'use strict'

// The records here name their partitions: kafkajs's notice about its default partitioner is noise.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'

const { Kafka, logLevel } = require('kafkajs')
const { version: kafkajsVersion } = require('kafkajs/package.json')

const TIMEOUT_MS = 30000
const PARTITIONS = 3
// How long a read_committed consumer is watched to show that it sees nothing.
const ABSENCE_MS = 5000
// How long a fetch waits for records (kafkajs's default, 5 s, slows every reader's start and stop).
const FETCH_WAIT_MS = 500
// How long a reader waits after the expected records for any that should not be there.
const QUIET_MS = 1000
// How long committed offsets may take to show once a transaction has ended.
const OFFSETS_WITHIN_MS = 10000
// How long the broker may take to abort a transaction that timed out.
const TXN_TIMEOUT_MS = 3000
const ABORTED_WITHIN_MS = 20000
// The error types of a fenced producer: kafkajs knows INVALID_PRODUCER_EPOCH (47) only.
const FENCED = ['INVALID_PRODUCER_EPOCH', 'PRODUCER_FENCED']

class Mismatch extends Error {}

/** A step that did not finish in time. */
class Timeout extends Mismatch {}

const check = (cond, what) => {
  if (!cond) throw new Mismatch(what)
}

const log = msg => console.log(msg)

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

const show = value => JSON.stringify(value)

const equal = (a, b) => show(a) === show(b)

/** `promise` within `ms`; a timeout or a failure becomes a Mismatch naming `what`. */
const bounded = async (what, promise, ms = TIMEOUT_MS) => {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(`${what} did not finish within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } catch (e) {
    if (e instanceof Mismatch) throw e
    throw new Mismatch(`${what} failed: ${describe(e)}`)
  } finally {
    clearTimeout(timer)
  }
}

/** An error with its causes, as kafkajs nests them (retries wrap the broker's error). */
const causes = e => {
  const out = []
  for (let c = e; c && out.length < 10; c = c.cause || c.originalError) out.push(c)
  return out
}

const describe = e =>
  causes(e)
    .map(c => `${c.name}${c.type ? ` [${c.type}]` : ''}: ${c.message}`)
    .join(' <- ')

const isFenced = e => causes(e).some(c => FENCED.includes(c.type))

/** Waits until `cond()` holds, checking every 100 ms for up to `ms`; returns whether it did. */
const waitUntil = async (cond, ms) => {
  const deadline = Date.now() + ms
  while (!(await cond())) {
    if (Date.now() >= deadline) return false
    await sleep(100)
  }
  return true
}

/** `count` records over the partitions in turn: [{partition, value: "tag-i"}]. */
const spread = (tag, count) =>
  Array.from({ length: count }, (_, i) => ({ partition: i % PARTITIONS, value: `${tag}-${i}` }))

/** {partition: [values in order]} of [{partition, value}]. */
const byPartition = records => {
  const out = {}
  for (let p = 0; p < PARTITIONS; p++) out[p] = []
  for (const { partition, value } of records) out[partition].push(value)
  return out
}

const messagesOf = records => records.map(({ partition, value }) => ({ partition, value }))

/** Everything this script opened, disconnected at the end. */
const clients = []

const track = client => {
  clients.push(client)
  return client
}

const disconnectAll = async () => {
  await Promise.all(clients.map(c => Promise.race([c.disconnect().catch(() => {}), sleep(10000)])))
}

// ---------------------------------------------------------------------------------------------
// Producers
// ---------------------------------------------------------------------------------------------

/** A connected transactional producer (idempotent, one request in flight). */
const transactional = async (kafka, transactionalId, extra = {}) => {
  const producer = track(
    kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1, ...extra })
  )
  await bounded(`producer ${transactionalId}: connect`, producer.connect())
  return producer
}

/** Begins a transaction; the first one of a producer sends its InitProducerId. */
const begin = (producer, what) => bounded(`${what}: transaction() (InitProducerId on the first)`, producer.transaction())

/** Sends `records` ([{partition, value}]) to `topic` in `target` (a producer or a transaction);
 * resolves once they are stored (acks: all). */
const sendAll = (target, topic, records, what) =>
  bounded(`${what}: send`, target.send({ topic, acks: -1, messages: messagesOf(records) }))

/** One transaction of `records`: committed if `commit`, else aborted. */
const inTransaction = async (producer, topic, records, commit, what) => {
  const txn = await begin(producer, what)
  await sendAll(txn, topic, records, what)
  if (commit) await bounded(`${what}: commit`, txn.commit())
  else await bounded(`${what}: abort`, txn.abort())
}

/** A connected plain (idempotent, non-transactional) producer. */
const plain = async kafka => {
  const producer = track(kafka.producer({ idempotent: true, maxInFlightRequests: 1 }))
  await bounded('plain producer: connect', producer.connect())
  return producer
}

// ---------------------------------------------------------------------------------------------
// Readers
// ---------------------------------------------------------------------------------------------

let readers = 0

/** A consumer in a group of its own that reads `topic` from the beginning with the isolation
 * `readUncommitted` gives; collects the values per partition and counts its fetches. */
const reader = async (kafka, prefix, topic, readUncommitted) => {
  const isolation = readUncommitted ? 'read_uncommitted' : 'read_committed'
  const state = { what: `${isolation} reader of ${topic}`, got: byPartition([]), fetches: 0 }
  readers += 1
  const consumer = track(
    kafka.consumer({ groupId: `${prefix}-reader-${readers}`, readUncommitted, maxWaitTimeInMs: FETCH_WAIT_MS })
  )
  consumer.on(consumer.events.FETCH, () => {
    state.fetches += 1
  })
  await bounded(`${state.what}: connect`, consumer.connect())
  await bounded(`${state.what}: subscribe`, consumer.subscribe({ topics: [topic], fromBeginning: true }))
  await bounded(
    `${state.what}: run`,
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        state.got[partition].push(message.value.toString())
      },
    })
  )
  state.consumer = consumer
  state.count = () => Object.values(state.got).reduce((n, v) => n + v.length, 0)
  return state
}

/** Waits until `r` has read as many records as `want` ({partition: [values]}) holds, then for a
 * quiet second; it must have read exactly `want`. */
const waitFor = async (r, want, ms = TIMEOUT_MS) => {
  const count = Object.values(want).reduce((n, v) => n + v.length, 0)
  await waitUntil(() => r.count() >= count, ms)
  await sleep(QUIET_MS)
  check(equal(r.got, want), `${r.what}: read ${show(r.got)}, expected ${show(want)}`)
}

/** `r` must have fetched (it has joined its group), then read nothing for `ms`. */
const expectNothing = async (r, ms, why) => {
  check(await waitUntil(() => r.fetches > 0, TIMEOUT_MS), `${r.what}: no fetch within ${TIMEOUT_MS} ms`)
  await waitUntil(() => r.count() > 0, ms)
  check(r.count() === 0, `${r.what} read ${show(r.got)} ${why}; expected nothing`)
}

const stop = r => bounded(`${r.what}: disconnect`, r.consumer.disconnect(), 10000)

const expectRead = async (kafka, prefix, topic, readUncommitted, want, what) => {
  const r = await reader(kafka, prefix, topic, readUncommitted)
  await waitFor(r, want)
  await stop(r)
  log(`${readUncommitted ? 'read_uncommitted' : 'read_committed'} reads ${r.count()} records of ${topic}: ${what}`)
}

const createTopics = async (admin, ...topics) => {
  const created = await bounded(
    `createTopics(${topics.join(', ')})`,
    admin.createTopics({
      topics: topics.map(topic => ({ topic, numPartitions: PARTITIONS, replicationFactor: 1 })),
      waitForLeaders: true,
    })
  )
  check(created, `createTopics(${topics.join(', ')}): not created (do they exist already?)`)
}

// ---------------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------------

const commitAndAbort = async (kafka, admin, prefix) => {
  const topic = `${prefix}-a`
  await createTopics(admin, topic)
  const [first, aborted, third] = [spread('c1', 12), spread('ab', 6), spread('c3', 9)]
  const producer = await transactional(kafka, `${prefix}-a-txn`)
  await inTransaction(producer, topic, first, true, 'first transaction')
  await inTransaction(producer, topic, aborted, false, 'second transaction')
  await inTransaction(producer, topic, third, true, 'third transaction')
  log('three transactions over 3 partitions: committed, aborted, committed')
  await expectRead(kafka, prefix, topic, false, byPartition([...first, ...third]), 'the committed records, none aborted')
  await expectRead(
    kafka,
    prefix,
    topic,
    true,
    byPartition([...first, ...aborted, ...third]),
    'committed and aborted records, no control records'
  )
}

const openTransactionHoldsBack = async (kafka, admin, prefix) => {
  const topic = `${prefix}-b`
  await createTopics(admin, topic)
  const txnRecords = Array.from({ length: 4 }, (_, i) => ({ partition: 0, value: `open-${i}` }))
  const producer = await transactional(kafka, `${prefix}-b-txn`)
  const txn = await begin(producer, 'open transaction')
  await sendAll(txn, topic, txnRecords, 'open transaction')
  await sendAll(await plain(kafka), topic, [{ partition: 0, value: 'plain-after' }], 'plain producer')
  const want = { ...byPartition([]), 0: [...txnRecords.map(r => r.value), 'plain-after'] }
  log('an open transaction wrote 4 records to partition 0, then a plain producer 1')

  const uncommitted = await reader(kafka, prefix, topic, true)
  await waitFor(uncommitted, want)
  log("read_uncommitted sees the open transaction's records and the plain one")

  const committed = await reader(kafka, prefix, topic, false)
  await expectNothing(committed, ABSENCE_MS, 'while the transaction was open')
  log(`read_committed sees nothing for ${ABSENCE_MS} ms while the transaction is open`)

  await bounded('open transaction: commit', txn.commit())
  await waitFor(committed, want)
  log('after the commit read_committed sees both, in offset order')
  await stop(committed)
  await stop(uncommitted)
}

/** The group's committed offsets of `topic`, {partition: offset}, those it has. */
const groupOffsets = async (admin, groupId, topic) => {
  const result = await bounded(`fetchOffsets(${groupId})`, admin.fetchOffsets({ groupId, topics: [topic] }))
  const out = {}
  for (const t of result) {
    if (t.topic !== topic) continue
    for (const { partition, offset } of t.partitions) {
      if (Number(offset) >= 0) out[partition] = Number(offset)
    }
  }
  return out
}

const sorted = offsets => Object.fromEntries(Object.entries(offsets).sort(([a], [b]) => a - b))

/** The group's offsets must become `want` within OFFSETS_WITHIN_MS (a transaction's offsets show
 * once its markers are written, which Kafka may do after EndTxn answers). */
const expectGroupOffsets = async (admin, groupId, topic, want, what) => {
  let got
  const ok = await waitUntil(async () => {
    got = await groupOffsets(admin, groupId, topic)
    return equal(got, sorted(want))
  }, OFFSETS_WITHIN_MS)
  check(ok, `${what}: the group's offsets are ${show(got)}, expected ${show(sorted(want))}`)
}

/** The group's offsets must stay `want` for 2 s. */
const expectGroupOffsetsStay = async (admin, groupId, topic, want, what) => {
  const deadline = Date.now() + 2000
  while (Date.now() < deadline) {
    const got = await groupOffsets(admin, groupId, topic)
    check(equal(got, sorted(want)), `${what}: the group's offsets are ${show(got)}, expected ${show(sorted(want))}`)
    await sleep(200)
  }
}

const readProcessWrite = async (kafka, admin, prefix) => {
  const [inTopic, outTopic, groupId] = [`${prefix}-c-in`, `${prefix}-c-out`, `${prefix}-c-group`]
  await createTopics(admin, inTopic, outTopic)
  const inputs = spread('in', 30)
  await sendAll(await plain(kafka), inTopic, inputs, 'input producer')

  // The group consumer hands its records to `inbox`; each transaction takes the next ones.
  const inbox = []
  const consumer = track(kafka.consumer({ groupId, readUncommitted: false, maxWaitTimeInMs: FETCH_WAIT_MS }))
  await bounded('group consumer: connect', consumer.connect())
  await bounded('group consumer: subscribe', consumer.subscribe({ topics: [inTopic], fromBeginning: true }))
  await bounded(
    'group consumer: run',
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        inbox.push({ partition, offset: Number(message.offset), value: message.value.toString() })
      },
    })
  )
  const producer = await transactional(kafka, `${prefix}-c-txn`)

  let taken = 0
  /** One read-process-write transaction of the next `count` records of the inbox. */
  const round = async (count, positions, commit, what) => {
    check(
      await waitUntil(() => inbox.length >= taken + count, TIMEOUT_MS),
      `${what}: the group consumer read ${inbox.length - taken} of ${count} records within ${TIMEOUT_MS} ms`
    )
    const records = inbox.slice(taken, taken + count)
    taken += count
    const txn = await begin(producer, what)
    await sendAll(txn, outTopic, records.map(r => ({ partition: r.partition, value: r.value.toUpperCase() })), what)
    for (const r of records) positions[r.partition] = r.offset + 1
    const partitions = Object.entries(positions).map(([partition, offset]) => ({
      partition: Number(partition),
      offset: String(offset),
    }))
    await bounded(`${what}: sendOffsets`, txn.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: inTopic, partitions }] }))
    if (commit) await bounded(`${what}: commit`, txn.commit())
    else await bounded(`${what}: abort`, txn.abort())
  }

  const positions = {}
  await round(12, positions, true, 'first round')
  const afterFirst = { ...positions }
  await expectGroupOffsets(admin, groupId, inTopic, afterFirst, 'after the commit')
  log(`a committed transaction commits the group's offsets ${show(sorted(afterFirst))}`)

  await round(18, positions, false, 'second round')
  await expectGroupOffsetsStay(admin, groupId, inTopic, afterFirst, 'after the abort')
  log("an aborted transaction leaves the group's offsets alone")

  for (let p = 0; p < PARTITIONS; p++) {
    consumer.seek({ topic: inTopic, partition: p, offset: String(afterFirst[p] || 0) })
  }
  const again = { ...afterFirst }
  await round(18, again, true, 'third round')
  const ends = {}
  for (let p = 0; p < PARTITIONS; p++) ends[p] = 10
  await expectGroupOffsets(admin, groupId, inTopic, ends, 'after the last commit')
  await bounded('group consumer: disconnect', consumer.disconnect(), 10000)

  const want = {}
  for (const [p, values] of Object.entries(byPartition(inputs))) want[p] = values.map(v => v.toUpperCase())
  await expectRead(
    kafka,
    prefix,
    outTopic,
    false,
    want,
    'every input record transformed exactly once (the aborted round left out)'
  )
}

/** `promise` must fail with a fencing error. */
const expectFenced = async (what, promise) => {
  let error
  try {
    await bounded(what, promise)
  } catch (e) {
    error = e
  }
  check(error, `${what} succeeded; expected it to be fenced`)
  check(!(error instanceof Timeout), error.message)
  // bounded() turned the client's error into a Mismatch naming it and its causes, with their types.
  check(/INVALID_PRODUCER_EPOCH|PRODUCER_FENCED/.test(error.message), `${what} failed, but not fenced: ${error.message}`)
  log(error.message)
}

const zombieFencing = async (kafka, admin, prefix) => {
  const [topic, txnId] = [`${prefix}-d`, `${prefix}-d-txn`]
  await createTopics(admin, topic)
  const zombie = await transactional(kafka, txnId)
  const zombieTxn = await begin(zombie, 'producer A')
  const zombieRecords = spread('zombie', 3)
  await sendAll(zombieTxn, topic, zombieRecords, 'producer A')
  log('producer A began a transaction and wrote 3 records')

  const successor = await transactional(kafka, txnId)
  // The first transaction() sends B's InitProducerId, which fences A and aborts its transaction.
  const successorTxn = await begin(successor, 'producer B')
  log('producer B with the same transactionalId initialized')
  await expectFenced(
    "A's send after B's init",
    zombieTxn.send({ topic, acks: -1, messages: [{ partition: 0, value: 'zombie-late' }] })
  )
  await expectFenced("A's commit", zombieTxn.commit())

  const successorRecords = spread('successor', 3)
  await sendAll(successorTxn, topic, successorRecords, 'producer B')
  await bounded('producer B: commit', successorTxn.commit())
  await expectRead(
    kafka,
    prefix,
    topic,
    false,
    byPartition(successorRecords),
    "B's records only (A's transaction was aborted by B's init)"
  )
  await expectRead(
    kafka,
    prefix,
    topic,
    true,
    byPartition([...zombieRecords, ...successorRecords]),
    "A's stored records and B's, not A's fenced send"
  )
}

const transactionTimeout = async (kafka, admin, prefix) => {
  const topic = `${prefix}-e`
  await createTopics(admin, topic)
  const idle = await transactional(kafka, `${prefix}-e-idle`, { transactionTimeout: TXN_TIMEOUT_MS })
  const idleTxn = await begin(idle, 'idle producer')
  await sendAll(
    idleTxn,
    topic,
    Array.from({ length: 3 }, (_, i) => ({ partition: 0, value: `idle-${i}` })),
    'idle producer'
  )
  log(`a producer with transactionTimeout ${TXN_TIMEOUT_MS} wrote 3 records and went idle`)
  const other = await transactional(kafka, `${prefix}-e-other`)
  await inTransaction(other, topic, [{ partition: 0, value: 'later' }], true, 'other producer')

  const r = await reader(kafka, prefix, topic, false)
  const began = Date.now()
  await waitUntil(() => r.count() > 0, ABORTED_WITHIN_MS)
  check(
    equal(r.got, { ...byPartition([]), 0: ['later'] }),
    `read_committed read ${show(r.got)} within ${ABORTED_WITHIN_MS} ms; expected only the later committed ` +
      'record once the broker aborted the timed-out transaction'
  )
  log(`the broker aborted the timed-out transaction: read_committed reads past it after ${Date.now() - began} ms`)
  await stop(r)
  let error
  try {
    await bounded("the timed-out producer's commit", idleTxn.commit())
  } catch (e) {
    error = e
  }
  check(error, "the timed-out producer's commit succeeded; expected it to fail")
  check(!(error instanceof Timeout), error.message)
  log(error.message)
}

const CASES = [
  ['a. commit and abort across partitions', commitAndAbort],
  ['b. an open transaction holds read_committed back', openTransactionHoldsBack],
  ['c. read-process-write with sendOffsets', readProcessWrite],
  ['d. zombie fencing', zombieFencing],
  ['e. transaction timeout', transactionTimeout],
]

const main = async () => {
  const [servers, prefixArg] = process.argv.slice(2)
  if (!servers) {
    console.error('usage: txn_kafkajs.js BOOTSTRAP [PREFIX]')
    process.exit(2)
  }
  const prefix = prefixArg || `js${process.pid}`
  log(`kafkajs ${kafkajsVersion}, node ${process.version}, bootstrap ${servers}, prefix ${prefix}`)
  const kafka = new Kafka({
    clientId: 'inlet-txn-test',
    brokers: [servers],
    logLevel: logLevel.ERROR,
    connectionTimeout: 10000,
    requestTimeout: TIMEOUT_MS,
  })
  const admin = track(kafka.admin())
  await bounded('admin: connect', admin.connect())
  for (const [name, run] of CASES) {
    log(`== ${name}`)
    await run(kafka, admin, prefix)
  }
}

main().then(
  async () => {
    await disconnectAll()
    log('OK')
    process.exit(0)
  },
  async e => {
    if (e instanceof Mismatch) console.error(`FAILED: ${e.message}`)
    else console.error(`FAILED with an unexpected error: ${describe(e)}\n${e.stack}`)
    await disconnectAll()
    process.exit(1)
  }
)
