/*
 * Orders: the line protocol the interoperability drivers (Driver,
 * SpringPool) speak with the TAP tests (test/perl/RlockTest/Redisson.pm).
 *
 * A driver prints one banner line, "ready <what runs>", then reads one
 * order per line from standard input:
 *
 *     <id> <actor> <op> [<arg> ...]
 *
 * and answers each, once it is done, with one line on standard output:
 *
 *     <id> ok <start> <end> <value>
 *     <id> err <start> <end> <what went wrong>
 *
 * where start and end are the epoch microseconds at which the order began
 * and ended; what went wrong is the driver's to say, and starts with an
 * exception class.  Arguments carry bytes outside printable ASCII, and
 * "%", as %XX.
 *
 * Orders to one actor run one after the other, on a thread of the actor's
 * own; orders to different actors run at the same time, so a test can
 * leave an actor waiting while it does something else.  The order "quit"
 * (or the end of the input) ends the loop.
 *
 * Copyright (c) 2026, rlock developers
 */
package rlock.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

final class Orders
{
	/* What a driver does with one order; its value is the answer */
	interface Performer
	{
		Object perform(String actor, String op, String[] args) throws Exception;
	}

	/* How a driver words a failure: an exception class first */
	interface Describer
	{
		String describe(Throwable failure);
	}

	private final PrintStream out =
		new PrintStream(System.out, true, StandardCharsets.UTF_8);
	private final Map<String, ExecutorService> actors = new ConcurrentHashMap<>();
	private final Performer performer;
	private final Describer describer;

	private Orders(Performer performer, Describer describer)
	{
		this.performer = performer;
		this.describer = describer;
	}

	/*
	 * Print the banner, then serve orders until "quit" or the end of the
	 * input; returns once the actors' threads are told to stop.
	 */
	static void serve(String running, Performer performer, Describer describer)
		throws java.io.IOException
	{
		new Orders(performer, describer).loop(running);
	}

	/*
	 * The failure itself, or the first cause that says something, by
	 * class and message.
	 */
	static String plainFailure(Throwable e)
	{
		Throwable cause = e;

		while (cause.getCause() != null && cause.getMessage() == null)
			cause = cause.getCause();
		return cause.getClass().getName() + " " + oneLine(cause.getMessage());
	}

	/*
	 * The version of the jar a class comes from, from the Maven data in
	 * the jar ("group/artifact"): for the banner
	 */
	static String jarVersion(Class<?> c, String artifact) throws java.io.IOException
	{
		java.util.Properties p = new java.util.Properties();

		try (var s = c.getResourceAsStream(
				 "/META-INF/maven/" + artifact + "/pom.properties"))
		{
			if (s == null)
				return "unknown";
			p.load(s);
		}
		return p.getProperty("version", "unknown");
	}

	static String oneLine(String s)
	{
		return String.valueOf(s).replace('\n', ' ');
	}

	private void loop(String running) throws java.io.IOException
	{
		BufferedReader in = new BufferedReader(
			new InputStreamReader(System.in, StandardCharsets.UTF_8));
		String line;

		out.println("ready " + running);
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

			for (int i = 0; i < a.length; i++)
				a[i] = unescape(words[i + 3]);
			actors.computeIfAbsent(actor, k -> Executors.newSingleThreadExecutor())
				.submit(() -> answer(id, actor, op, a));
		}
		for (ExecutorService e : actors.values())
			e.shutdownNow();
	}

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
			Object value = performer.perform(actor, op, a);

			reply = id + " ok " + start + " " + nowMicros() + " " + value;
		}
		catch (Throwable e)
		{
			reply = id + " err " + start + " " + nowMicros() + " " +
				describer.describe(e);
		}
		synchronized (out)
		{
			out.println(reply);
		}
	}
}
