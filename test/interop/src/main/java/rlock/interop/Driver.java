/*
 * Driver: a Java service taking Redisson locks on orders, for rlock's
 * interoperability tests.
 *
 * It reads one order per line from standard input:
 *
 *     <id> <actor> <op> [<arg> ...]
 *
 * and answers each, once it is done, with one line on standard output:
 *
 *     <id> ok <start> <end> <value>
 *     <id> err <start> <end> <exception class> <message>
 *
 * where start and end are the epoch microseconds at which the order began
 * and ended.
 *
 * An actor "c.t" is thread t of Redisson client c: every client is its
 * own RedissonClient (its own id, as a separate JVM would have), every
 * thread a thread of its own, since Redisson locks belong to a thread.
 * Orders to one actor run one after the other; orders to different actors
 * run at the same time, so a test can leave an actor waiting for a lock
 * while it does something else.
 *
 * Options: --redis redis://host:port, --codec default|string (the codec
 * the clients are configured with), --watchdog ms (lockWatchdogTimeout),
 * --jdbc url (for "stress").  With --sentinel name the clients find the
 * primary of that name through the Sentinels --redis lists, comma
 * separated, as useSentinelServers does; --password is the data nodes'
 * password and --sentinel-password the Sentinels'.  With --cluster yes the
 * clients use the Redis Cluster whose nodes --redis lists, comma
 * separated, as useClusterServers does; --sharded off sets
 * shardedSubscriptionMode OFF (Redisson 3.29 and later) for classic
 * pub/sub.
 *
 * Copyright (c) 2026, rlock developers
 */
package rlock.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.ClusterServersConfig;
import org.redisson.config.Config;

public final class Driver
{
	private final String redisAddress;
	private final String codec;
	private final long watchdogMs;
	private final String jdbcUrl;
	private final PrintStream out;
	/* the Sentinels' name for the primary, or null: one server */
	private String sentinelMaster;
	private String password;
	private String sentinelPassword;
	private boolean cluster;
	private boolean shardedOff;

	private final Map<String, RedissonClient> clients = new ConcurrentHashMap<>();
	private final Map<String, ExecutorService> actors = new ConcurrentHashMap<>();
	/* one lock object per actor and key: it remembers its lease for unlocks */
	private final Map<String, RLock> locks = new ConcurrentHashMap<>();

	private Driver(String redisAddress, String codec, long watchdogMs,
				   String jdbcUrl)
	{
		this.redisAddress = redisAddress;
		this.codec = codec;
		this.watchdogMs = watchdogMs;
		this.jdbcUrl = jdbcUrl;
		this.out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
	}

	public static void main(String[] args) throws Exception
	{
		String redis = "redis://127.0.0.1:6379";
		String codec = "default";
		long watchdog = 30000;
		String jdbc = null;
		String sentinel = null;
		String password = null;
		String sentinelPassword = null;
		boolean cluster = false;
		boolean shardedOff = false;

		for (int i = 0; i + 1 < args.length; i += 2)
		{
			switch (args[i])
			{
				case "--redis" -> redis = args[i + 1];
				case "--codec" -> codec = args[i + 1];
				case "--watchdog" -> watchdog = Long.parseLong(args[i + 1]);
				case "--jdbc" -> jdbc = args[i + 1];
				case "--sentinel" -> sentinel = args[i + 1];
				case "--password" -> password = args[i + 1];
				case "--sentinel-password" -> sentinelPassword = args[i + 1];
				case "--cluster" -> cluster = args[i + 1].equals("yes");
				case "--sharded" -> shardedOff = args[i + 1].equals("off");
				default -> throw new IllegalArgumentException("unknown option " + args[i]);
			}
		}
		Driver d = new Driver(redis, codec, watchdog, jdbc);

		d.sentinelMaster = sentinel;
		d.password = password;
		d.sentinelPassword = sentinelPassword;
		d.cluster = cluster;
		d.shardedOff = shardedOff;
		d.run();
	}

	private void run() throws Exception
	{
		BufferedReader in = new BufferedReader(
			new InputStreamReader(System.in, StandardCharsets.UTF_8));
		String line;

		out.println("ready " + redissonVersion());
		while ((line = in.readLine()) != null)
		{
			String[] words = line.trim().split(" ");

			if (words.length < 3)
				continue;
			if (words[2].equals("quit"))
				break;
			String id = words[0];
			String actor = words[1];
			String op = words[2];
			String[] a = new String[words.length - 3];

			System.arraycopy(words, 3, a, 0, a.length);
			for (int i = 0; i < a.length; i++)
				a[i] = unescape(a[i]);
			actors.computeIfAbsent(actor, k -> Executors.newSingleThreadExecutor())
				.submit(() -> answer(id, actor, op, a));
		}
		for (ExecutorService e : actors.values())
			e.shutdownNow();
		for (RedissonClient c : clients.values())
			c.shutdown();
		System.exit(0);
	}

	/* The Redisson version on the class path, from its jar's Maven data */
	private static String redissonVersion() throws java.io.IOException
	{
		java.util.Properties p = new java.util.Properties();

		try (var s = Redisson.class.getResourceAsStream(
				 "/META-INF/maven/org.redisson/redisson/pom.properties"))
		{
			if (s == null)
				return "unknown";
			p.load(s);
		}
		return p.getProperty("version", "unknown");
	}

	/* Arguments are sent with %XX for bytes that are not printable ASCII */
	private static String unescape(String s)
	{
		if (s.indexOf('%') < 0)
			return s;
		byte[] buf = new byte[s.length()];
		int n = 0;

		for (int i = 0; i < s.length(); i++)
		{
			char c = s.charAt(i);

			if (c == '%' && i + 2 < s.length())
			{
				buf[n++] = (byte) Integer.parseInt(s.substring(i + 1, i + 3), 16);
				i += 2;
			}
			else
				buf[n++] = (byte) c;
		}
		return new String(buf, 0, n, StandardCharsets.UTF_8);
	}

	private static long nowMicros()
	{
		Instant t = Instant.now();

		return t.getEpochSecond() * 1_000_000L + t.getNano() / 1000;
	}

	private void answer(String id, String actor, String op, String[] a)
	{
		String reply;
		long start = nowMicros();

		try
		{
			Object value = perform(actor, op, a);

			reply = id + " ok " + start + " " + nowMicros() + " " + value;
		}
		catch (Throwable e)
		{
			Throwable cause = e;

			while (cause.getCause() != null && cause.getMessage() == null)
				cause = cause.getCause();
			reply = id + " err " + start + " " + nowMicros() + " " +
				cause.getClass().getName() + " " +
				String.valueOf(cause.getMessage()).replace('\n', ' ');
		}
		synchronized (out)
		{
			out.println(reply);
		}
	}

	private RedissonClient client(String actor)
	{
		String name = actor.contains(".") ? actor.substring(0, actor.indexOf('.')) : actor;

		return clients.computeIfAbsent(name, k -> {
			Config config = new Config();

			if (cluster)
			{
				ClusterServersConfig c = config.useClusterServers()
					.addNodeAddress(redisAddress.split(","))
					.setPassword(password);

				if (shardedOff)
					shardedSubscriptionOff(c);
			}
			else if (sentinelMaster == null)
				config.useSingleServer().setAddress(redisAddress)
					.setPassword(password);
			else
				config.useSentinelServers()
					.setMasterName(sentinelMaster)
					.addSentinelAddress(redisAddress.split(","))
					.setPassword(password)
					.setSentinelPassword(sentinelPassword);
			config.setLockWatchdogTimeout(watchdogMs);
			if (codec.equals("string"))
				config.setCodec(StringCodec.INSTANCE);
			return Redisson.create(config);
		});
	}

	/*
	 * shardedSubscriptionMode OFF, by name: older Redisson versions have no
	 * such setting, and fail here.
	 */
	private static void shardedSubscriptionOff(ClusterServersConfig c)
	{
		try
		{
			Class<?> mode = Class.forName("org.redisson.config.ShardedSubscriptionMode");
			Object off = mode.getField("OFF").get(null);

			c.getClass().getMethod("setShardedSubscriptionMode", mode).invoke(c, off);
		}
		catch (ReflectiveOperationException e)
		{
			throw new IllegalStateException("this Redisson has no shardedSubscriptionMode", e);
		}
	}

	private RLock lock(String actor, String key)
	{
		return lock(actor, "plain", key);
	}

	/*
	 * The lock object of an actor for a key, of a kind: "plain" (getLock),
	 * "read" and "write" (the two halves of getReadWriteLock), "fair"
	 * (getFairLock).
	 */
	private RLock lock(String actor, String kind, String key)
	{
		return locks.computeIfAbsent(actor + "\u0000" + kind + "\u0000" + key, k -> {
			RedissonClient c = client(actor);

			switch (kind)
			{
				case "plain":
					return c.getLock(key);
				case "read":
					return c.getReadWriteLock(key).readLock();
				case "write":
					return c.getReadWriteLock(key).writeLock();
				case "fair":
					return c.getFairLock(key);
				default:
					throw new IllegalArgumentException("unknown lock kind " + kind);
			}
		});
	}

	private RFencedLock fenced(String actor, String key)
	{
		return (RFencedLock) locks.computeIfAbsent(actor + "\u0001" + key,
												   k -> client(actor).getFencedLock(key));
	}

	private Object perform(String actor, String op, String[] a) throws Exception
	{
		/* "<kind>.<op>": the same on another kind of lock (see lock()) */
		if (op.contains("."))
		{
			String kind = op.substring(0, op.indexOf('.'));
			RLock l = lock(actor, kind, a[0]);

			switch (op.substring(op.indexOf('.') + 1))
			{
				case "trylock":
					if (a.length > 2)
						return l.tryLock(Long.parseLong(a[1]), Long.parseLong(a[2]),
										 TimeUnit.MILLISECONDS);
					return l.tryLock(Long.parseLong(a[1]), TimeUnit.MILLISECONDS);
				case "unlock":
					l.unlock();
					return "done";
				case "islocked":
					return l.isLocked();
				case "forceunlock":
					return l.forceUnlock();
				default:
					throw new IllegalArgumentException("unknown order " + op);
			}
		}
		switch (op)
		{
			case "lock":
				if (a.length > 1)
					lock(actor, a[0]).lock(Long.parseLong(a[1]), TimeUnit.MILLISECONDS);
				else
					lock(actor, a[0]).lock();
				return "done";
			case "trylock":
				if (a.length > 2)
					return lock(actor, a[0]).tryLock(Long.parseLong(a[1]),
													 Long.parseLong(a[2]),
													 TimeUnit.MILLISECONDS);
				return lock(actor, a[0]).tryLock(Long.parseLong(a[1]),
												 TimeUnit.MILLISECONDS);
			case "unlock":
				lock(actor, a[0]).unlock();
				return "done";
			case "forceunlock":
				return lock(actor, a[0]).forceUnlock();
			case "islocked":
				return lock(actor, a[0]).isLocked();
			case "held":
				return lock(actor, a[0]).isHeldByCurrentThread();
			case "holdcount":
				return lock(actor, a[0]).getHoldCount();
			case "ttl":
				return lock(actor, a[0]).remainTimeToLive();
			case "fencedlock":
				return fenced(actor, a[0]).lockAndGetToken();
			case "fencedunlock":
				fenced(actor, a[0]).unlock();
				return "done";
			case "token":
				return fenced(actor, a[0]).getToken();
			case "id":
				return client(actor).getId();
			case "owner":
				/* the hash field this thread's holds have */
				return client(actor).getId() + ":" + Thread.currentThread().getId();
			case "sleep":
				Thread.sleep(Long.parseLong(a[0]));
				return "done";
			case "stress":
				return stress(actor, a[0], Integer.parseInt(a[1]),
							  Integer.parseInt(a[2]));
			default:
				throw new IllegalArgumentException("unknown order " + op);
		}
	}

	/*
	 * threads threads of the actor's client each do iterations times, under
	 * the Redisson lock on key and committed before the unlock: read the
	 * counter row named key, write it back plus one, and record the span of
	 * the critical section in "spans".  Returns how many sections ran.
	 */
	private Object stress(String actor, String key, int threads, int iterations)
		throws Exception
	{
		List<Thread> workers = new ArrayList<>();
		List<Throwable> failures = new ArrayList<>();
		RedissonClient c = client(actor);

		for (int t = 0; t < threads; t++)
		{
			Thread w = new Thread(() -> {
				RLock l = c.getLock(key);

				try (Connection db = DriverManager.getConnection(jdbcUrl))
				{
					db.setAutoCommit(false);
					PreparedStatement read = db.prepareStatement(
						"SELECT n, clock_timestamp() FROM counters WHERE k = ?");
					PreparedStatement write = db.prepareStatement(
						"UPDATE counters SET n = ? WHERE k = ?");
					PreparedStatement span = db.prepareStatement(
						"INSERT INTO spans VALUES (?, ?, clock_timestamp())");

					for (int i = 0; i < iterations; i++)
					{
						l.lock();
						try
						{
							read.setString(1, key);
							try (ResultSet r = read.executeQuery())
							{
								r.next();
								long n = r.getLong(1);
								java.sql.Timestamp s = r.getTimestamp(2);

								write.setLong(1, n + 1);
								write.setString(2, key);
								write.executeUpdate();
								span.setString(1, key);
								span.setTimestamp(2, s);
								span.executeUpdate();
							}
							db.commit();
						}
						finally
						{
							l.unlock();
						}
					}
				}
				catch (Throwable e)
				{
					synchronized (failures)
					{
						failures.add(e);
					}
				}
			});
			workers.add(w);
			w.start();
		}
		for (Thread w : workers)
			w.join();
		if (!failures.isEmpty())
			throw new RuntimeException(failures.get(0));
		return threads * iterations;
	}
}
