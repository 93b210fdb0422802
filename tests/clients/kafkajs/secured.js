// kafkajs 2.x against a secured Skein listener, for tests/security.rs: produce 50
// records, read them back in a group, exit non-zero on any failure.
//   node secured.js BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD CAFILE TOPIC
// (MECHANISM, USER and PASSWORD are '-' for SSL without SASL)
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, protocol, mechanism, user, password, cafile, topic] = process.argv.slice(2);
const config = { clientId: 'skein-secured', brokers: [bootstrap], logLevel: logLevel.ERROR };
if (protocol.endsWith('SSL')) {
  config.ssl = { ca: [fs.readFileSync(cafile, 'utf-8')] };
}
if (mechanism !== '-') {
  config.sasl = { mechanism: mechanism.toLowerCase(), username: user, password };
}

async function main() {
  const kafka = new Kafka(config);
  const producer = kafka.producer();
  await producer.connect();
  const messages = Array.from({ length: 50 }, (_, i) => ({ key: `k${i}`, value: `secured-${i}` }));
  await producer.send({ topic, messages, acks: -1 });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `secured-${topic}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const seen = new Set();
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${seen.size} of 50`)), 30000);
    consumer.run({
      eachMessage: async ({ message }) => {
        seen.add(message.value.toString());
        if (seen.size === 50) {
          clearTimeout(timer);
          resolve();
        }
      },
    });
  });
  await consumer.disconnect();
  console.log('ok 50');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
