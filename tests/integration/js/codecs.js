'use strict'
// Compression codecs for kafkajs 2.2.4 built only from pure-JS / WebAssembly npm packages (no native build):
// gzip is built into kafkajs; snappy comes from kafkajs-snappy (snappyjs); lz4 and zstd are small wrappers here.
// (@kafkajs/zstd and kafkajs-lz4 need node-gyp builds that fail on Node 20, so they are not used.)
const { CompressionTypes, CompressionCodecs } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const lz4js = require('lz4js')
const xxh32 = require('lz4js/xxh32.js')
const zstd = require('@bokuweb/zstd-wasm')

const LZ4_BLOCK_INDEPENDENCE = 0x20

// lz4js writes a frame without the block-independence flag, which Kafka's Java reader insists on
// (KafkaLZ4BlockInputStream). Its frames hold one 4 MB block, so the data is independent: set the flag and
// recompute the header checksum (second byte of xxh32 over FLG and BD, seed 0).
function lz4Compress (buffer) {
  const out = Buffer.from(lz4js.compress(buffer))
  out[4] |= LZ4_BLOCK_INDEPENDENCE
  out[6] = (xxh32.hash(0, out, 4, 2) >> 8) & 0xff
  return out
}

const LZ4_BLOCK_SIZES = { 4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20 }

// lz4js' own frame reader mishandles block checksums (it skips them before the block, not after), which
// cramjam/aiokafka frames carry; so the frame is parsed here and only the block decoder is lz4js'. Blocks are
// decoded into one contiguous buffer, which also serves frames with linked (dependent) blocks.
function lz4Decompress (src) {
  if (src.readUInt32LE(0) !== 0x184d2204) throw new Error('lz4: bad frame magic')
  const flg = src[4]
  const maxBlock = LZ4_BLOCK_SIZES[(src[5] >> 4) & 7]
  if (!maxBlock) throw new Error('lz4: bad block size')
  let pos = 6 + (flg & 0x08 ? 8 : 0) + (flg & 0x01 ? 4 : 0) + 1
  const blockSum = (flg & 0x10) !== 0
  const blocks = []
  for (;;) {
    const word = src.readUInt32LE(pos)
    pos += 4
    if (word === 0) break
    const size = word & 0x7fffffff
    blocks.push({ start: pos, size, raw: (word & 0x80000000) !== 0 })
    pos += size + (blockSum ? 4 : 0)
  }
  const dst = Buffer.alloc(blocks.length * maxBlock)
  let out = 0
  for (const b of blocks) {
    if (b.raw) {
      src.copy(dst, out, b.start, b.start + b.size)
      out += b.size
    } else {
      out = lz4js.decompressBlock(src, dst, b.start, b.size, out)
    }
  }
  return dst.subarray(0, out)
}

const LZ4Codec = () => ({
  async compress (encoder) {
    return lz4Compress(encoder.buffer)
  },
  async decompress (buffer) {
    return lz4Decompress(Buffer.from(buffer))
  }
})

let zstdReady = null
const ZstdCodec = () => ({
  async compress (encoder) {
    await (zstdReady = zstdReady || zstd.init())
    return Buffer.from(zstd.compress(encoder.buffer, 3))
  },
  async decompress (buffer) {
    await (zstdReady = zstdReady || zstd.init())
    // frames without a content size (streaming compressors) need an upper bound for the output
    return Buffer.from(zstd.decompress(buffer, { defaultHeapSize: 64 * 1024 * 1024 }))
  }
})

function registerCodecs () {
  CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
  CompressionCodecs[CompressionTypes.LZ4] = LZ4Codec
  CompressionCodecs[CompressionTypes.ZSTD] = ZstdCodec
}

const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD
}

module.exports = { registerCodecs, COMPRESSION }
