'use strict'
// Drives kafkajs 2.2.4 for tests/integration/test_clients_kafkajs.py.
//
//   node kafkajs_cli.js < request.json      request: {"op": "...", "brokers": ["127.0.0.1:9092"], ...}
//
// Prints one JSON document on stdout: {"ok": true, "result": ...} or {"ok": false, "error": {...}}.
// kafkajs' own log lines go to stderr. Binary keys, values and header values travel base64-encoded
// (null stays null). Every client is created with kafkajs' defaults apart from the broker list, a client id
// and an stderr logger.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'

const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs')
const { registerCodecs, COMPRESSION } = require('./codecs')

registerCodecs()

const b64 = buf => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'))
const unb64 = s => (s === null || s === undefined ? null : Buffer.from(s, 'base64'))

const stderrLogger = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
}

function client (req) {
  return new Kafka({
    clientId: req.clientId || 'odradek-kafkajs-test',
    brokers: req.brokers,
    logLevel: logLevel[req.logLevel || 'WARN'],
    logCreator: stderrLogger
  })
}

function decodeHeaders (headers) {
  // kafkajs gives {key: Buffer | [Buffer, ...]}; flatten to [[key, b64], ...] in record order is not
  // possible for repeated keys (kafkajs groups them), so arrays keep their order per key.
  const out = []
  for (const [k, v] of Object.entries(headers || {})) {
    if (Array.isArray(v)) v.forEach(x => out.push([k, b64(x)]))
    else out.push([k, b64(v)])
  }
  return out
}

function encodeHeaders (pairs) {
  if (!pairs || pairs.length === 0) return undefined
  const out = {}
  for (const [k, v] of pairs) {
    const value = unb64(v)
    if (k in out) out[k] = [].concat(out[k], [value])
    else out[k] = value
  }
  return out
}

function record (m, partition) {
  return {
    partition,
    offset: Number(m.offset),
    key: b64(m.key),
    value: b64(m.value),
    headers: decodeHeaders(m.headers),
    timestamp: Number(m.timestamp)
  }
}

const ops = {
  // {topic, messages: [{key, value, headers: [[k, v]], timestamp, partition}], compression, acks, idempotent}
  async produce (req) {
    const producer = client(req).producer(req.idempotent ? { idempotent: true } : undefined)
    await producer.connect()
    try {
      const sendArgs = {
        topic: req.topic,
        compression: COMPRESSION[req.compression || 'none'],
        messages: req.messages.map(m => {
          const msg = { key: unb64(m.key), value: unb64(m.value) }
          const headers = encodeHeaders(m.headers)
          if (headers) msg.headers = headers
          if (m.timestamp !== undefined && m.timestamp !== null) msg.timestamp = String(m.timestamp)
          if (m.partition !== undefined && m.partition !== null) msg.partition = m.partition
          return msg
        })
      }
      if (req.acks !== undefined) sendArgs.acks = req.acks
      const meta = await producer.send(sendArgs)
      return meta.map(r => ({
        partition: r.partition,
        errorCode: r.errorCode,
        baseOffset: r.baseOffset === undefined ? null : Number(r.baseOffset)
      }))
    } finally {
      await producer.disconnect()
    }
  },

  // One transaction of a transactional producer: {topic, transactionalId, messages, commit}, and optionally the
  // group offsets it commits: {groupId, offsets: [{topic, partitions: [{partition, offset}]}]}
  async transaction (req) {
    const producer = client(req).producer({ transactionalId: req.transactionalId, idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    try {
      const txn = await producer.transaction()
      try {
        if (req.messages.length) {
          await txn.send({
            topic: req.topic,
            messages: req.messages.map(m => ({ key: unb64(m.key), value: unb64(m.value), partition: m.partition }))
          })
        }
        if (req.offsets) await txn.sendOffsets({ consumerGroupId: req.groupId, topics: req.offsets })
        if (req.commit) await txn.commit()
        else await txn.abort()
      } catch (e) {
        await txn.abort().catch(() => {})
        throw e
      }
      return { committed: Boolean(req.commit) }
    } finally {
      await producer.disconnect()
    }
  },

  // The public consumer (always a group member): {topic, groupId, count, timeoutMs}
  async consume (req) {
    const consumer = client(req).consumer({ groupId: req.groupId })
    const got = []
    await consumer.connect()
    try {
      await consumer.subscribe({ topics: [req.topic], fromBeginning: true })
      await new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`timed out after ${req.timeoutMs} ms with ${got.length}/${req.count} records`)),
          req.timeoutMs || 30000
        )
        consumer.on(consumer.events.CRASH, e => { clearTimeout(timer); reject(e.payload.error) })
        consumer.run({
          eachMessage: async ({ partition, message }) => {
            got.push(record(message, partition))
            if (got.length >= req.count) { clearTimeout(timer); resolve() }
          }
        }).catch(reject)
      })
    } finally {
      await consumer.disconnect()
    }
    got.sort((a, b) => a.partition - b.partition || a.offset - b.offset)
    return got
  },

  // kafkajs' Fetch path without a group (the cluster/broker objects its consumer uses):
  // {topic, partition, offset, count, timeoutMs, maxWaitTime}
  async fetch (req) {
    const kafka = client(req)
    const sym = Object.getOwnPropertySymbols(kafka).find(s => s.description === 'private:Kafka:createCluster')
    const cluster = kafka[sym]({ allowAutoTopicCreation: false })
    await cluster.connect()
    const got = []
    const deadline = Date.now() + (req.timeoutMs || 30000)
    try {
      await cluster.addTargetTopic(req.topic)
      await cluster.refreshMetadata()
      const leaders = cluster.findLeaderForPartitions(req.topic, [req.partition])
      const nodeId = Object.keys(leaders)[0]
      const broker = await cluster.findBroker({ nodeId })
      let offset = req.offset || 0
      let highWatermark = null
      while (got.length < req.count) {
        if (Date.now() > deadline) {
          throw new Error(`timed out with ${got.length}/${req.count} records (next offset ${offset})`)
        }
        const res = await broker.fetch({
          maxWaitTime: req.maxWaitTime === undefined ? 500 : req.maxWaitTime,
          topics: [{ topic: req.topic, partitions: [{ partition: req.partition, fetchOffset: String(offset), maxBytes: 1048576 }] }]
        })
        const p = res.responses[0].partitions[0]
        if (p.errorCode !== 0) {
          const e = new Error(`fetch error code ${p.errorCode}`)
          e.code = p.errorCode
          throw e
        }
        highWatermark = Number(p.highWatermark)
        for (const m of p.messages) {
          if (m.isControlRecord) continue
          if (Number(m.offset) < offset) continue
          got.push(record(m, req.partition))
          offset = Number(m.offset) + 1
          if (got.length >= req.count) break
        }
      }
      return { records: got, highWatermark }
    } finally {
      await cluster.disconnect()
    }
  },

  // The ApiVersions table kafkajs read, and per API it uses: {apiName: [version it speaks, newest it knows]}.
  async apiVersions (req) {
    const kafka = client(req)
    const sym = Object.getOwnPropertySymbols(kafka).find(s => s.description === 'private:Kafka:createCluster')
    const cluster = kafka[sym]({ allowAutoTopicCreation: false })
    await cluster.connect()
    try {
      const { requests } = require('kafkajs/src/protocol/requests')
      const apiKeys = require('kafkajs/src/protocol/requests/apiKeys')
      const advertised = cluster.brokerPool.versions
      const chosen = {}
      for (const [name, key] of Object.entries(apiKeys)) {
        const definition = requests[name]
        if (!definition || !advertised[key] || !definition.versions.length) continue
        const best = Math.max(...definition.versions.map(Number))
        chosen[name] = [Math.min(best, advertised[key].maxVersion), best]
      }
      return { advertised, chosen }
    } finally {
      await cluster.disconnect()
    }
  },

  async createTopics (req) {
    return withAdmin(req, admin => admin.createTopics({
      topics: req.topics,
      validateOnly: !!req.validateOnly,
      waitForLeaders: req.validateOnly ? false : (req.waitForLeaders !== false)
    }))
  },

  async deleteTopics (req) {
    return withAdmin(req, admin => admin.deleteTopics({ topics: req.topics }))
  },

  async createPartitions (req) {
    return withAdmin(req, admin => admin.createPartitions({ topicPartitions: req.topicPartitions }))
  },

  async fetchTopicMetadata (req) {
    return withAdmin(req, admin => admin.fetchTopicMetadata(req.topics ? { topics: req.topics } : undefined))
  },

  async listTopics (req) {
    return withAdmin(req, admin => admin.listTopics())
  },

  async fetchTopicOffsets (req) {
    return withAdmin(req, admin => admin.fetchTopicOffsets(req.topic))
  },

  async fetchTopicOffsetsByTimestamp (req) {
    return withAdmin(req, admin => admin.fetchTopicOffsetsByTimestamp(req.topic, req.timestamp))
  },

  // {resources: [{type: "TOPIC"|"BROKER", name, configNames}], includeSynonyms}
  async describeConfigs (req) {
    return withAdmin(req, admin => admin.describeConfigs({
      includeSynonyms: !!req.includeSynonyms,
      resources: req.resources.map(r => ({
        type: ConfigResourceTypes[r.type],
        name: r.name,
        configNames: r.configNames
      }))
    }))
  },

  // {resources: [{type, name, configEntries: [{name, value}]}], validateOnly}
  async alterConfigs (req) {
    return withAdmin(req, admin => admin.alterConfigs({
      validateOnly: !!req.validateOnly,
      resources: req.resources.map(r => ({ type: ConfigResourceTypes[r.type], name: r.name, configEntries: r.configEntries }))
    }))
  },

  async describeCluster (req) {
    return withAdmin(req, admin => admin.describeCluster())
  },

  // {topic, partitions: [{partition, offset}]}
  async deleteTopicRecords (req) {
    // kafkajs looks the leaders up in metadata it must already hold for the topic
    return withAdmin(req, async admin => (await admin.fetchTopicMetadata({ topics: [req.topic] })) && admin.deleteTopicRecords({
      topic: req.topic,
      partitions: req.partitions.map(p => ({ partition: p.partition, offset: String(p.offset) }))
    }))
  }
}

async function withAdmin (req, fn) {
  const admin = client(req).admin()
  await admin.connect()
  try {
    return await fn(admin)
  } finally {
    await admin.disconnect()
  }
}

function describeError (e) {
  const out = { name: e.name, message: e.message, type: e.type, code: e.code, retriable: e.retriable }
  if (e.errors) out.errors = e.errors.map(describeError)
  if (e.originalError) out.originalError = describeError(e.originalError)
  if (e.cause && e.cause !== e) out.cause = describeError(e.cause)
  return out
}

async function main () {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const req = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  const op = ops[req.op]
  if (!op) throw new Error(`unknown op ${req.op}`)
  let out
  try {
    const result = await op(req)
    out = { ok: true, result: result === undefined ? null : result }
  } catch (e) {
    out = { ok: false, error: describeError(e) }
  }
  const text = JSON.stringify(out, (k, v) => (typeof v === 'bigint' ? v.toString() : v)) + '\n'
  // large outputs go to a pipe asynchronously: exit only once they are flushed
  await new Promise(resolve => process.stdout.write(text, resolve))
}

main().then(
  () => process.exit(0),
  e => {
    process.stderr.write(`kafkajs_cli: ${e && e.stack}\n`)
    process.exit(2)
  }
)
