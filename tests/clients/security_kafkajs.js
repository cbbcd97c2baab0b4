#!/usr/bin/env node
/*
 * Inlet's Kafka security with kafkajs (pure JavaScript, its own TLS and SASL code) as an
 * independent client.
 *
 * Usage: NODE_PATH=DIR/node_modules node security_kafkajs.js SSL_BOOTSTRAP SASL_SSL_BOOTSTRAP CERT_DIR
 *
 * The node is the one of tests/kafka_tls.rs after tls.py's `run` phase: the topic `secure`,
 * readable and writable by `User:CN=client-a,O=Example` (the client certificate of
 * CERT_DIR/client.pem), `admin` a super user with SCRAM credentials (password admin-secret).
 *
 *   a. SASL_SSL with SCRAM-SHA-512 as admin: creates `js-secure`, produces and reads it back.
 *   b. SASL_SSL with PLAIN and a wrong password: the connection fails with a SASL
 *      authentication error.
 *   c. SSL with client-a's certificate (mTLS): produces to `secure`; to `js-secure`, which no
 *      ACL grants it, it is refused with TOPIC_AUTHORIZATION_FAILED.
 *   d. deny overrides allow: admin adds a DENY of WRITE on `secure` for client-a; its produce
 *      is refused; once the DENY is deleted, it is allowed again.
 *
 * Prints OK at the end; exits non-zero on a mismatch.
 */
const fs = require("fs");
const { Kafka, logLevel, AclResourceTypes, AclOperationTypes, AclPermissionTypes,
        ResourcePatternTypes } = require("kafkajs");

const [sslBootstrap, saslBootstrap, certs] = process.argv.slice(2);
const ca = [fs.readFileSync(`${certs}/ca.pem`)];

function fail(what) {
  console.log(`FAILED: ${what}`);
  process.exit(1);
}

function client(brokers, ssl, sasl) {
  return new Kafka({
    clientId: "inlet-security-kafkajs",
    brokers: [brokers],
    ssl,
    sasl,
    logLevel: logLevel.NOTHING,
    retry: { retries: 2, initialRetryTime: 200 },
    connectionTimeout: 5000,
  });
}

const admin = client(saslBootstrap, { ca }, { mechanism: "scram-sha-512", username: "admin", password: "admin-secret" });
const clientA = client(sslBootstrap, {
  ca,
  cert: fs.readFileSync(`${certs}/client.pem`),
  key: fs.readFileSync(`${certs}/client.key`),
}, undefined);

async function produce(kafka, topic, value) {
  const p = kafka.producer({ allowAutoTopicCreation: false });
  await p.connect();
  try {
    await p.send({ topic, messages: [{ value }], acks: -1 });
    return null;
  } catch (e) {
    return e;
  } finally {
    await p.disconnect();
  }
}

// Whether `e` is a refusal with Kafka error `type`: kafkajs gives the type on a protocol
// error, and only the error's text ("Topic authorization failed") once it wraps it.
function refusedWith(e, type, text) {
  if (!e) return false;
  const seen = [e, e.originalError, e.cause, ...(e.errors || [])].filter(Boolean);
  return seen.some((x) => x.type === type || (x.message || "").includes(text));
}

(async () => {
  // a.
  const a = admin.admin();
  await a.connect();
  await a.createTopics({ topics: [{ topic: "js-secure", numPartitions: 1 }], waitForLeaders: true });
  let err = await produce(admin, "js-secure", "from-admin");
  if (err) fail(`admin produces over SASL_SSL: ${err}`);
  const c = admin.consumer({ groupId: "js-admins" });
  await c.connect();
  await c.subscribe({ topic: "js-secure", fromBeginning: true });
  const got = await new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), 30000);
    c.run({ eachMessage: async ({ message }) => { clearTimeout(timer); resolve(message.value.toString()); } });
  });
  await c.disconnect();
  if (got !== "from-admin") fail(`admin reads back over SASL_SSL: ${got}`);
  console.log("a. ok");

  // b.
  const wrong = client(saslBootstrap, { ca }, { mechanism: "plain", username: "admin", password: "wrong" });
  const w = wrong.admin();
  try {
    await w.connect();
    await w.listTopics();
    fail("a wrong password is refused");
  } catch (e) {
    if (!/SASL|[Aa]uthentication/.test(`${e.name} ${e.message}`)) fail(`a wrong password fails authentication, not ${e.name}: ${e.message}`);
  } finally {
    await w.disconnect().catch(() => {});
  }
  console.log("b. ok");

  // c.
  err = await produce(clientA, "secure", "from-kafkajs-mtls");
  if (err) fail(`client-a produces to secure over mTLS: ${err}`);
  err = await produce(clientA, "js-secure", "not-allowed");
  if (!refusedWith(err, "TOPIC_AUTHORIZATION_FAILED", "Topic authorization failed")) fail(`client-a is refused js-secure: ${err}`);
  console.log("c. ok");

  // d.
  const deny = {
    resourceType: AclResourceTypes.TOPIC,
    resourceName: "secure",
    resourcePatternType: ResourcePatternTypes.LITERAL,
    principal: "User:CN=client-a,O=Example",
    host: "*",
    operation: AclOperationTypes.WRITE,
    permissionType: AclPermissionTypes.DENY,
  };
  await a.createAcls({ acl: [deny] });
  err = await produce(clientA, "secure", "denied");
  if (!refusedWith(err, "TOPIC_AUTHORIZATION_FAILED", "Topic authorization failed")) fail(`a DENY overrides the ALLOW: ${err}`);
  const deleted = await a.deleteAcls({ filters: [deny] });
  const matching = deleted.filterResponses.flatMap((r) => r.matchingAcls);
  if (matching.length !== 1) fail(`DeleteAcls deletes the DENY: ${JSON.stringify(deleted)}`);
  err = await produce(clientA, "secure", "allowed-again");
  if (err) fail(`allowed again without the DENY: ${err}`);
  console.log("d. ok");
  await a.disconnect();
  console.log("OK");
  process.exit(0);
})().catch((e) => fail(`${e.name}: ${e.message}`));
