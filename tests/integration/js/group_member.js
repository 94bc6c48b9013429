'use strict'
// One kafkajs consumer-group member in its own process, for tests/integration/test_groups_*.py.
//
//   node group_member.js '{"bootstrap": "127.0.0.1:9092", "group": "g", "topic": "t", "assignor": "roundrobin"}'
//
// Prints the same JSON-lines events as tests/integration/group_member.py:
//   assigned {partitions, member_id}, revoked {partitions}, records {records: [[partition, offset]]},
//   committed {offsets: {partition: next offset}}, commit_failed {error}, closed.
// kafkajs only ships its own "RoundRobinAssigner"; to share a group with the Java-style clients it runs the
// same algorithm under the standard protocol name "roundrobin" (the assignment bytes are the standard
// ConsumerProtocol format either way). SIGTERM disconnects (leaving the group) and exits 0.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'

const { Kafka, logLevel, PartitionAssigners } = require('kafkajs')

const req = JSON.parse(process.argv[2])

const emit = (event, fields = {}) => {
  process.stdout.write(JSON.stringify({ event, t: Date.now() / 1000, ...fields }) + '\n')
}

// The same round-robin algorithm as kafkajs' RoundRobinAssigner, advertised as "roundrobin".
const StandardRoundRobin = config => {
  const inner = PartitionAssigners.roundRobin(config)
  return {
    name: 'roundrobin',
    version: inner.version,
    assign: inner.assign.bind(inner),
    protocol: ({ topics }) => ({ name: 'roundrobin', metadata: inner.protocol({ topics }).metadata })
  }
}

async function main () {
  const kafka = new Kafka({
    clientId: req.clientId || 'odradek-kafkajs-member',
    brokers: [req.bootstrap],
    logLevel: logLevel.WARN,
    logCreator: () => ({ label, namespace, log }) => {
      process.stderr.write(`[kafkajs ${label} ${namespace}] ${log.message}\n`)
    }
  })
  const options = {
    groupId: req.group,
    partitionAssigners: [req.assignor === 'roundrobin' ? StandardRoundRobin : PartitionAssigners.roundRobin]
  }
  if (req.session_timeout_ms) options.sessionTimeout = req.session_timeout_ms
  const consumer = kafka.consumer(options)
  let owned = []
  consumer.on(consumer.events.GROUP_JOIN, e => {
    owned = (e.payload.memberAssignment[req.topic] || []).slice().sort((a, b) => a - b)
    emit('assigned', { partitions: owned, member_id: e.payload.memberId })
  })
  consumer.on(consumer.events.REBALANCING, () => {
    // kafkajs revokes everything (eager) when it rejoins.
    emit('revoked', { partitions: owned })
    owned = []
  })

  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    try {
      await consumer.disconnect()
    } finally {
      emit('closed')
      process.exit(0)
    }
  }
  process.on('SIGTERM', stop)

  await consumer.connect()
  await consumer.subscribe({ topics: [req.topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      if (!isRunning() || isStale() || batch.messages.length === 0) return
      const records = batch.messages.map(m => [batch.partition, Number(m.offset)])
      emit('records', { records })
      for (const m of batch.messages) resolveOffset(m.offset)
      const next = String(Number(batch.lastOffset()) + 1)
      try {
        await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }])
        emit('committed', { offsets: { [batch.partition]: Number(next) } })
      } catch (e) {
        emit('commit_failed', { error: String(e && e.type ? e.type : e) })
      }
      await heartbeat()
    }
  })
}

main().catch(e => {
  process.stderr.write(`group_member.js failed: ${e && e.stack ? e.stack : e}\n`)
  process.exit(1)
})
