/*
 * driver.js: a Node.js service taking locks with node-redisson, for rlock's
 * interoperability tests; a second client, written independently of
 * Redisson for Java, that claims Redisson's lock layout.
 *
 * It speaks the line protocol of the Java driver (../src/main/java/rlock/
 * interop/Driver.java): orders "<id> <actor> <op> [<arg> ...]" on standard
 * input, arguments with %XX for bytes that are not printable ASCII, and
 * one answer per order when it is done:
 *
 *     <id> ok <start> <end> <value>
 *     <id> err <start> <end> <error name> <message>
 *
 * start and end in epoch microseconds.  An actor "c.t" is owner t of
 * client c: every client is a Redisson object of its own (its own id and
 * connections), and t is the lock's clientId, the second half of the hash
 * field "<client id>:<t>".  Orders to one actor run one after the other,
 * orders to different actors at the same time.
 *
 * Orders: lock key [leaseMs]; trylock key waitMs [leaseMs]; unlock key;
 * islocked key; forceunlock key; owner (the hash field of the actor's
 * holds); listeners key (how many of the client's waits listen for the
 * key's unlock message: node-redisson subscribes first and listens only
 * once the subscription is confirmed, and a message in between is lost
 * to it, so a test waits for this before it unlocks).
 *
 * Options: --redis-port port, --watchdog ms.
 *
 * Copyright (c) 2026, rlock developers
 */
'use strict';

const readline = require('node:readline');
const { Redisson } = require('node-redisson');

function option(name, fallback) {
	const i = process.argv.indexOf(name);
	return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const port = Number(option('--redis-port', '6379'));
const watchdog = BigInt(option('--watchdog', '30000'));

const clients = new Map();
const queues = new Map();

function client(name) {
	if (!clients.has(name)) {
		clients.set(name, new Redisson({
			redis: { options: { host: '127.0.0.1', port } },
			lockWatchdogTimeout: watchdog,
		}));
	}
	return clients.get(name);
}

function unescape(s) {
	if (!s.includes('%'))
		return s;
	const bytes = [];
	for (let i = 0; i < s.length; i++) {
		if (s[i] === '%' && i + 2 < s.length) {
			bytes.push(parseInt(s.slice(i + 1, i + 3), 16));
			i += 2;
		} else {
			bytes.push(s.charCodeAt(i));
		}
	}
	return Buffer.from(bytes).toString('utf8');
}

function nowMicros() {
	return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

async function perform(actor, op, a) {
	const [c, t] = actor.split('.');
	const redisson = client(c);
	const lock = () => redisson.getLock(a[0], t ?? '1');

	switch (op) {
		case 'lock':
			if (a.length > 1)
				await lock().lock(BigInt(a[1]));
			else
				await lock().lock();
			return 'done';
		case 'trylock':
			return await lock().tryLock(BigInt(a[1]), a.length > 2 ? BigInt(a[2]) : true);
		case 'unlock':
			await lock().unlock();
			return 'done';
		case 'islocked':
			return await lock().isLocked();
		case 'forceunlock':
			return await lock().forceUnlock();
		case 'owner':
			return `${redisson.commandExecutor.id}:${t ?? '1'}`;
		case 'listeners':
			return redisson.commandExecutor.eventEmitter
				.listenerCount(lock().getChannelName());
		default:
			throw new Error(`unknown order ${op}`);
	}
}

async function answer(id, actor, op, a) {
	const start = nowMicros();
	let reply;
	try {
		const value = await perform(actor, op, a);
		reply = `${id} ok ${start} ${nowMicros()} ${value}`;
	} catch (e) {
		reply = `${id} err ${start} ${nowMicros()} ${e.name ?? 'Error'} ` +
			String(e.message).replace(/\n/g, ' ');
	}
	process.stdout.write(reply + '\n');
}

async function quit() {
	await Promise.allSettled([...clients.values()].map((c) => c.quit()));
	process.exit(0);
}

const input = readline.createInterface({ input: process.stdin });

input.on('line', (line) => {
	const words = line.trim().split(' ');
	if (words.length < 3)
		return;
	const [id, actor, op] = words;
	if (op === 'quit') {
		quit();
		return;
	}
	const a = words.slice(3).map(unescape);
	const before = queues.get(actor) ?? Promise.resolve();
	queues.set(actor, before.then(() => answer(id, actor, op, a)));
});
input.on('close', quit);

const version = require('node-redisson/package.json').version;
process.stdout.write(`ready ${version}\n`);
