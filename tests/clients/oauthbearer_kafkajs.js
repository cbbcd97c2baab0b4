#!/usr/bin/env node
/*
 * SASL/OAUTHBEARER with kafkajs (its own SASL code): a token from Inlet's token endpoint
 * (OAuth2 client credentials at the HTTP listener) given to kafkajs's `oauthBearerProvider`.
 *
 * Usage: NODE_PATH=DIR/node_modules node oauthbearer_kafkajs.js SASL_BOOTSTRAP TOKEN_URL TOPIC
 *
 * The node is the one of the OAUTHBEARER test in tests/kafka_sasl.rs after oauthbearer.py:
 * alice (password alice-secret) may write TOPIC.
 *
 *   a. alice's token: kafkajs produces to TOPIC;
 *   b. a token with a forged signature: the connection fails with a SASL authentication
 *      error.
 *
 * Prints OK at the end; exits non-zero on a mismatch.
 */
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, tokenUrl, topic] = process.argv.slice(2);

function fail(what) {
  console.log(`FAILED: ${what}`);
  process.exit(1);
}

function client(token) {
  return new Kafka({
    clientId: "inlet-oauth-kafkajs",
    brokers: [bootstrap],
    sasl: { mechanism: "oauthbearer", oauthBearerProvider: async () => ({ value: token }) },
    logLevel: logLevel.NOTHING,
    retry: { retries: 2 },
  });
}

(async () => {
  const form = new URLSearchParams({ grant_type: "client_credentials", client_id: "alice",
                                     client_secret: "alice-secret" });
  const answer = await fetch(tokenUrl, { method: "POST", body: form });
  if (answer.status !== 200) fail(`the token endpoint answered ${answer.status}`);
  const token = (await answer.json()).access_token;

  const producer = client(token).producer();
  await producer.connect();
  await producer.send({ topic, messages: [{ key: "k", value: "from-kafkajs" }] });
  await producer.disconnect();
  console.log("ok: a. kafkajs produces with alice's token");

  const forged = token.slice(0, token.lastIndexOf(".") + 1) + "A".repeat(43);
  const bad = client(forged).producer();
  try {
    await bad.connect();
    fail("b. a forged token is refused");
  } catch (e) {
    if (!/SASL|authentication/i.test(`${e.name} ${e.message}`)) fail(`b. not a SASL error: ${e}`);
    console.log(`ok: b. a forged token is refused: ${e.message}`);
  }
  console.log("OK");
})().catch((e) => fail(`${e.stack || e}`));
