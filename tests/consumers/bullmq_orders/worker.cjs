// The BullMQ worker of handler.cjs: one fulfilment line per job, then the warehouse call.
"use strict";
const fs = require("node:fs");
const { Worker } = require("bullmq");

const file = process.argv[2];
const url = new URL(process.env.REDIS_URL);
const worker = new Worker(
  "orders",
  async (job) => {
    fs.appendFileSync(file, JSON.stringify({ event_id: job.data.eventId, order_id: job.data.orderId }) + "\n");
    await new Promise((done) => setTimeout(done, 300));
  },
  { connection: { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null } },
);
worker.waitUntilReady().then(() => console.log("bullmq worker ready"));
