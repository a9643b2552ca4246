// A Stripe consumer on BullMQ: the handler verifies the signature, adds a job deduplicated by the
// event id (jobId) and answers 200; worker.cjs fulfils. ACKLAB_TEST_REMOVE_ON_COMPLETE: "true"
// (the mistake: a completed job is deleted, and its jobId dedupe with it) or "age" (completed
// jobs are kept for Stripe's three-day retry window). GET /effects/<event id> counts fulfilments.
"use strict";
const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const { Queue } = require("bullmq");

const [port, file] = [Number(process.argv[2]), process.argv[3]];
const secret = process.env.ACKLAB_TEST_STRIPE_SECRET;
const url = new URL(process.env.REDIS_URL);
const queue = new Queue("orders", { connection: { host: url.hostname, port: Number(url.port) } });
const removeOnComplete = process.env.ACKLAB_TEST_REMOVE_ON_COMPLETE === "true" ? true : { age: 3 * 86400 };

function verified(header, body) {
  const parts = Object.fromEntries((header || "").split(",").map((p) => p.split("=", 2)));
  if (!parts.t || !parts.v1 || Math.abs(Date.now() / 1000 - Number(parts.t)) > 300) return false;
  const expected = crypto.createHmac("sha256", secret).update(`${parts.t}.${body}`).digest("hex");
  return parts.v1.length === expected.length && crypto.timingSafeEqual(Buffer.from(parts.v1), Buffer.from(expected));
}

function answer(res, status, doc) {
  const body = JSON.stringify(doc);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

function fulfilments(eventId) {
  let text = "";
  try { text = fs.readFileSync(file, "utf8"); } catch { return 0; }
  return text.split("\n").filter((line) => line && JSON.parse(line).event_id === eventId).length;
}

http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    const body = Buffer.concat(chunks).toString("utf8");
    if (req.method === "GET" && req.url.startsWith("/effects/")) {
      return answer(res, 200, { count: fulfilments(decodeURIComponent(req.url.slice(9))) });
    }
    if (req.method !== "POST" || req.url !== "/stripe") return answer(res, 404, { error: "no such route" });
    if (!verified(req.headers["stripe-signature"], body)) return answer(res, 400, { error: "invalid signature" });
    const event = JSON.parse(body);
    if (event.type !== "payment_intent.succeeded") return answer(res, 200, { ignored: event.type });
    try {
      await queue.add("fulfil", { eventId: event.id, orderId: event.data.object.order_id },
        { jobId: event.id, removeOnComplete, removeOnFail: 1000 });
    } catch (err) {
      return answer(res, 503, { error: `enqueue failed: ${err.name}` });
    }
    return answer(res, 200, { queued: true });
  });
}).listen(port, "127.0.0.1");
