# A Redis that lies, or something on the path that does (a broken proxy,
# an attacker): a relay in front of a real Redis (RlockTest::Hostile)
# answers rlock's commands with frames Redis never sends.  For each frame:
# the postmaster did not restart (a session opened before keeps its
# backend), the worker kept its pid, the statement that met the frame
# ended with 58030 within rlock.connect_timeout + rlock.command_timeout,
# the worker's memory stayed under 64 MB, the commands it sent per second
# stayed bounded (no hot loop), rlock_status() says what was wrong, and
# once the relay tells the truth again, locks work.

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Hostile;

plan skip_all => 'the relay reads the plain protocol: not over TLS'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $hostile = RlockTest::Hostile->start($redis->port);
my $node = RlockTest::node('hostile', $redis,
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => [
		'rlock.port = ' . $hostile->port,
		'rlock.database = 1',
		"rlock.watchdog_timeout = '1500ms'",
		'log_min_messages = warning'
	]);
# the locks live in database 1 (so that SELECT is part of the handshake)
my $db = $redis->connect;
$db->call('SELECT', 1);
sub db { return $db->call(@_) }

my $budget = 1 + 1 + 0.5;	# connect + command timeout, and scheduling slack
my $max_rate = 100;			# commands per second from the worker
my $max_rss_kb = 64 * 1024;

# the scripts, told apart by their digests
my %sha;
for my $name (qw(acquire release renew verify force holder probe))
{
	$sha{$name} = sha1_hex(RlockTest::script_text(
			($ENV{TESTDIR} // '.') . "/src/kinds/plain/$name.lua"));
}
my $acquire = qr/^EVALSHA $sha{acquire} /;

my $postmaster = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
my $worker = RlockTest::worker_pid($node);
my $watch = $node->background_psql('postgres');
# it lives through the whole file, which may take longer than the
# session timeout (180 s): time each query instead
$watch->set_query_timer_restart;
my $watch_pid = $watch->query_safe('SELECT pg_backend_pid()');

sub rss_kb
{
	open(my $fh, '<', "/proc/$worker/status") or return 0;
	while (<$fh>)
	{
		return $1 if /^VmRSS:\s+(\d+)/;
	}
	return 0;
}

sub timed_psql { return RlockTest::timed_psql($node, @_) }

sub last_error_at
{
	return $node->safe_psql('postgres',
		'SELECT coalesce(last_error_at::text, \'\') FROM rlock_status()');
}

sub last_error
{
	return $node->safe_psql('postgres',
		'SELECT coalesce(last_error, \'\') FROM rlock_status()');
}

# The instance, the worker and the worker's manners while the relay still
# lies: commands per second are counted over a window of their own, so a
# hot loop shows whatever the statement did before.
sub survived
{
	my ($name) = @_;
	my $window = 1.5;
	my $c0 = $hostile->commands;
	my $t0 = time;
	RlockTest::wait_until(sub { time - $t0 >= $window }, $window + 1);
	my $rate = ($hostile->commands - $c0) / (time - $t0);
	my $pid = eval { $watch->query_safe('SELECT pg_backend_pid()') } // '';
	is($pid, $watch_pid, "$name: no restart of the instance");
	is((split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0],
		$postmaster, "$name: same postmaster");
	is(RlockTest::worker_pid($node), $worker, "$name: the worker survived");
	cmp_ok(rss_kb(), '<', $max_rss_kb, "$name: the worker stayed under 64 MB");
	cmp_ok($rate, '<', $max_rate,
		sprintf("%s: %.0f commands a second, no hot loop", $name, $rate));
}

# Run $sql against a lying relay set up by $setup; expect $outcome
# (a pattern for the error, or 'ok'); check that rlock_status() names
# $why.  With survived => 0 the caller checks survived() once after a
# group of attacks.
sub attack
{
	my (%a) = @_;
	my $name = $a{name};
	$hostile->clear;
	ok(RlockTest::wait_for_redis($node, 10), "$name: rlock works before");
	$a{before}->() if $a{before};
	$a{setup}->();
	my ($rc, $out, $err, $elapsed) = timed_psql($a{sql});
	if ($a{outcome} eq 'ok')
	{
		is($rc, 0, "$name: the statement works") or diag($err);
		like($out, $a{out}, "$name: and returns what it should")
		  if $a{out};
	}
	else
	{
		like($err, $a{outcome}, "$name: the statement fails as it should");
		cmp_ok($elapsed, '<', $budget,
			"$name: within connect + command timeout ($elapsed s)");
	}
	$a{check}->() if $a{check};
	if ($a{why})
	{
		ok(RlockTest::wait_until(sub { last_error() =~ $a{why} }, 5),
			"$name: rlock_status() says why")
		  or diag('last error: ' . last_error());
	}
	survived($name) if $a{survived} // 1;
	$hostile->clear;
	ok(RlockTest::wait_for_redis($node, 10),
		"$name: locks work again once the relay is honest");
	$a{after}->() if $a{after};
}

my $e58030 = qr/ERROR:  58030: could not reach Redis/;

#---- the command connection ----

attack(
	name => 'unsolicited +OK',
	setup => sub {
		# the release of wait_for_redis's probe may still be on its way
		# back: an +OK that meets it answers the release instead, and the
		# connection is dropped for a reply of the wrong shape.  Inject
		# again (at most three times) until one met an idle connection.
		for my $try (1 .. 3)
		{
			my $before = last_error_at();
			$hostile->inject('rlock_command', "+OK\r\n");
			RlockTest::wait_until(sub { last_error_at() ne $before }, 5);
			last if last_error() =~ /no command waiting/;
			RlockTest::wait_for_redis($node, 10);
		}
	},
	sql => "SELECT rlock_try('h:1')",
	outcome => 'ok',
	why => qr/a reply with no command waiting for it \(a status of 2 bytes\)/);

attack(
	name => 'an array of 2147483647 elements',
	setup => sub { $hostile->replace('rlock_command', $acquire, "*2147483647\r\n") },
	sql => "SELECT rlock_try('h:2')",
	outcome => $e58030,
	why => qr/an array of 2147483647 elements, over the limit/);

attack(
	name => 'a bulk string that never ends',
	setup => sub {
		$hostile->stream('rlock_command', $acquire, "\$999999999999\r\n");
	},
	sql => "SELECT rlock_try('h:3')",
	outcome => $e58030,
	why => qr/a string of 999999999999 bytes|without a complete reply/);

attack(
	name => 'arrays nested past the limit',
	setup => sub {
		$hostile->replace('rlock_command', $acquire, "*1\r\n" x 5 . ":1\r\n");
	},
	sql => "SELECT rlock_try('h:4')",
	outcome => $e58030,
	why => qr/arrays nested 5 deep, over the limit of 4/);

attack(
	name => 'a bad type byte',
	setup => sub { $hostile->replace('rlock_command', $acquire, "!oops\r\n") },
	sql => "SELECT rlock_try('h:5')",
	outcome => $e58030,
	why => qr/a protocol error/);

# RESP3's values, which a Redis sends only to a client that said HELLO 3
# (rlock speaks RESP2 and never does), in place of an acquire's reply or
# inside it: a protocol error each.  hiredis 0.14 refuses their type
# bytes itself; 1.x parses them and rlock refuses the value it is handed,
# RESP3's null among them, which 1.x would pass on as a nil like $-1 (a
# release's "not held").
sub resp3_refused
{
	my ($byte, $type) = @_;
	return qr/a protocol error \((?:Protocol error, got "\Q$byte\E" as reply type byte|\Q$type\E \(RESP3\), where RESP2 was spoken)\)/;
}

my @resp3 = (
	[ 'a double', ",1.5\r\n", ',', 'a double' ],
	[ 'a boolean', "#t\r\n", '#', 'a boolean' ],
	[ 'a map', "%1\r\n:1\r\n:1\r\n", '%', 'a map' ],
	[ 'a set', "~2\r\n:1\r\n:1\r\n", '~', 'a set' ],
	[ 'a push', ">2\r\n:1\r\n:1\r\n", '>', 'a push' ],
	[ 'a verbatim string', "=8\r\ntxt:abcd\r\n", '=', 'a verbatim string' ],
	[ 'a big number', "(12345678901234567890\r\n", '(', 'a big number' ],
	[ 'an attribute before the reply',
		"|1\r\n+ttl\r\n:5\r\n*2\r\n:1\r\n:1\r\n", '|', 'an attribute' ],
	[ 'a null', "_\r\n", '_', 'a null' ],
	[ 'a map of count -1', "%-1\r\n", '%', 'a map' ],
	[ 'a set of count -1', "~-1\r\n", '~', 'a set' ],
	[ 'a push of count -1', ">-1\r\n", '>', 'a push' ],
	[ 'a double inside the array', "*2\r\n:1\r\n,1.5\r\n", ',', 'a double' ],
	[ 'a null inside the array', "*2\r\n:0\r\n_\r\n", '_', 'a null' ],
	[ 'a set of 2^32 - 1 elements', "~4294967295\r\n", '~', 'a set' ],
	[ 'a map of 2^32 - 1 pairs inside the array',
		"*2\r\n:1\r\n%4294967295\r\n", '%', 'a map' ],
	[ 'a set three arrays deep', "*1\r\n*1\r\n~1\r\n:1\r\n", '~', 'a set' ]);
for my $i (0 .. $#resp3)
{
	my ($what, $bytes, $byte, $type) = @{ $resp3[$i] };
	my $refused = resp3_refused($byte, $type);
	attack(
		name => "RESP3, $what",
		setup => sub { $hostile->replace('rlock_command', $acquire, $bytes) },
		sql => "SELECT rlock_try('h:resp3')",
		outcome => qr/ERROR:  58030: could not reach Redis for lock "h:resp3"\n.*DETAIL:  No usable connection to Redis at [^\n]*: a reply rlock does not accept: $refused/s,
		why => $refused,
		# the instance and the worker are checked after the last: the
		# same since the start
		survived => $i == $#resp3);
}

# wrong reply types, for every command the worker sends after its
# handshake (the handshake's own follow)
attack(
	name => 'acquire answered with an integer',
	setup => sub { $hostile->replace('rlock_command', $acquire, ":1\r\n") },
	sql => "SELECT rlock_try('h:6')",
	outcome => $e58030,
	why => qr/a reply of the wrong shape \(an integer\)/);

attack(
	name => 'acquire answered with an unknown status',
	setup => sub {
		$hostile->replace('rlock_command', $acquire, "*3\r\n:9\r\n:9\r\n:0\r\n");
	},
	sql => "SELECT rlock_try('h:7')",
	outcome => $e58030,
	why => qr/an acquire \(lock kind plain\) answered with an unknown status/);

# a busy answer naming a holder of a kind the plain kind does not know,
# and a grant naming one (only a busy answer may)
for my $reply ("*3\r\n:0\r\n:100\r\n:7\r\n", "*3\r\n:1\r\n:0\r\n:1\r\n")
{
	attack(
		name => 'acquire answered with an unknown blocker: ' . ($reply =~ s/\r\n/ /gr),
		setup => sub { $hostile->replace('rlock_command', $acquire, $reply) },
		sql => "SELECT rlock_try('h:7b', '1 s')",
		outcome => $e58030,
		why => qr/an acquire \(lock kind plain\) answered with an unknown status/);
}

attack(
	name => 'a grant with a fencing token nobody asked for',
	setup => sub {
		$hostile->replace('rlock_command', $acquire, "*3\r\n:1\r\n:7\r\n:0\r\n");
	},
	sql => "SELECT rlock_try('h:7t')",
	outcome => $e58030,
	why => qr/a grant with a fencing token nobody asked for/);

attack(
	name => 'a holder query answered with elements of the wrong types',
	setup => sub {
		$hostile->replace('rlock_command', qr/^EVALSHA $sha{holder} /,
			"*6\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n");
	},
	sql => "SELECT * FROM rlock_holder('h:7h')",
	outcome => qr/ERROR:  58030: could not reach Redis for lock "h:7h"\n.*DETAIL:  Redis answered a holder query with a reply rlock does not accept/s,
	why => qr/a holder query \(lock kind plain\) answered with an unknown status/);

attack(
	name => 'a forced release answered with an array',
	setup => sub {
		$hostile->replace('rlock_command', qr/^EVALSHA $sha{force} /, "*1\r\n:1\r\n");
	},
	sql => "SELECT rlock_force_release('h:7f')",
	outcome => $e58030,
	why => qr/a reply of the wrong shape \(an array of 1 elements\)/);

# busy for longer than any timestamp holds: the waiter waits out its own
# wait, neither retrying at once (a time that wrapped into the past) nor
# for ever; and a negative lease, which Redis never gives, does not make
# it retry in a hot loop either
for my $pttl ('9223372036854775807', '-5')
{
	my $t0;
	attack(
		name => "acquire answered busy for $pttl ms",
		setup => sub {
			$hostile->replace('rlock_command', $acquire,
				"*3\r\n:0\r\n:$pttl\r\n:0\r\n");
		},
		sql => "SELECT rlock_try('h:ttl', '1500 ms')",
		outcome => 'ok',
		out => qr/^f$/,
		check => sub {
			my $c0 = $hostile->commands;
			my $t1 = time;
			my ($rc, $out) = timed_psql("SELECT rlock_try('h:ttl', '1500 ms')");
			my $rate = ($hostile->commands - $c0) / (time - $t1);
			is($out, 'f', "busy for $pttl ms: the wait ends");
			cmp_ok($rate, '<', $max_rate,
				sprintf('busy for %s ms: %.0f commands a second while waiting',
					$pttl, $rate));
		});
}

# a reply that never comes, on a connection that stays open: the request
# fails once its commands went unanswered for command_timeout +
# connect_timeout, across the reconnection and resend in between, and the
# session is told that Redis did not answer
attack(
	name => 'an acquire never answered',
	setup => sub { $hostile->mute('rlock_command', $acquire) },
	sql => "SELECT rlock_try('h:mute')",
	outcome => qr/ERROR:  58030: could not reach Redis for lock "h:mute"\n.*DETAIL:  Redis at [^\n]* did not answer within rlock.command_timeout \+ rlock.connect_timeout \(2000 ms\)/s);

attack(
	name => 'a probe (rlock_is_locked) answered with a string',
	setup => sub {
		$hostile->replace('rlock_command', qr/^EVALSHA $sha{probe} /, "\$1\r\nx\r\n");
	},
	sql => "SELECT rlock_is_locked('h:8')",
	outcome => $e58030,
	why => qr/a reply of the wrong shape \(a string of 1 bytes\)/);

attack(
	name => 'a probe (rlock_ttl) answered with an array',
	setup => sub { $hostile->replace('rlock_command', qr/^EVALSHA $sha{probe} /, "*0\r\n") },
	sql => "SELECT rlock_ttl('h:9')",
	outcome => $e58030,
	why => qr/a reply of the wrong shape \(an array of 0 elements\)/);

attack(
	name => 'PING answered with an integer',
	before => sub { $node->safe_psql('postgres', "SELECT rlock_session_try('h:10')") },
	setup => sub { $hostile->replace('rlock_command', qr/^PING$/, ":1\r\n") },
	sql => "SELECT rlock_session_try('h:10'); SELECT rlock_release_all()",
	outcome => $e58030,
	why => qr/a reply of the wrong shape \(an integer\)/);

# the release script runs (the relay lies about its reply only), but the
# worker cannot know: it sends the release again after each reconnection,
# whose reply kills that connection too, until the relay is honest;
# meanwhile requests fail.  RESP3's null must not pass for a nil, which
# would say the lock was not held and end the release.
for my $case (
	[ 'an array', "*2\r\n:1\r\n:1\r\n",
		qr/a reply of the wrong shape \(an array of 2 elements\)/ ],
	[ "RESP3's null", "_\r\n", resp3_refused('_', 'a null') ])
{
	my ($what, $bytes, $why) = @$case;
	my $s = $node->background_psql('postgres');
	attack(
		name => "release answered with $what",
		before => sub {
			$s->query_safe("BEGIN; SELECT rlock_try('h:11');");
		},
		setup => sub {
			$hostile->replace('rlock_command', qr/^EVALSHA $sha{release} /,
				$bytes);
			$s->query_safe('COMMIT');
			RlockTest::wait_until(sub { last_error() =~ $why }, 5);
		},
		sql => "SELECT rlock_try('h:11b')",
		outcome => $e58030,
		why => $why,
		after => sub {
			ok(RlockTest::wait_until(sub { !db('EXISTS', 'h:11') }, 10),
				"release answered with $what: nothing is left of the lock");
		});
	$s->quit;
}

attack(
	name => 'verify answered with too few numbers',
	setup => sub {
		$hostile->replace('rlock_command', qr/^EVALSHA $sha{verify} /,
			"*1\r\n:1\r\n");
	},
	sql => "BEGIN; SELECT rlock_try('h:12'), rlock_try('h:12b'); COMMIT",
	outcome => $e58030,
	why => qr/a reply of the wrong shape \(an array of 1 elements\)/);

{
	my $s = $node->background_psql('postgres');
	attack(
		name => 'renewal answered with a status',
		before => sub { $s->query_safe("SELECT rlock_session_try('h:13')") },
		setup => sub {
			$hostile->replace('rlock_command', qr/^EVALSHA $sha{renew} /,
				"+OK\r\n");
			RlockTest::wait_until(sub { last_error() =~ /a status of 2 bytes/ }, 5);
		},
		sql => "SELECT 1",
		outcome => 'ok',
		why => qr/a reply of the wrong shape \(a status of 2 bytes\)/,
		after => sub {
			$s->query_safe("SELECT rlock_session_try('h:13b')");
			my $prev = db('PTTL', 'h:13b');
			ok( RlockTest::wait_until(
					sub {
						my $now = db('PTTL', 'h:13b');
						my $renewed = $now > $prev + 50;
						$prev = $now;
						return $renewed;
					},
					5),
				'renewals resume once the relay is honest');
		});
	$s->quit;
}

# the handshake: a connection that cannot complete it is made again and
# again, with back-off; requests wait rlock.connect_timeout for it
for my $case (
	[ 'SELECT', qr/^SELECT /, ":1\r\n", qr/wrong shape/ ],
	[ 'CLIENT SETNAME', qr/^CLIENT SETNAME /, ":1\r\n", qr/wrong shape/ ],
	[ 'INFO', qr/^INFO /, ":1\r\n", qr/wrong shape/ ],
	[ 'CLIENT ID', qr/^CLIENT ID$/, "+OK\r\n", qr/wrong shape/ ],
	[ 'CLIENT KILL', qr/^CLIENT KILL /, "\$2\r\nno\r\n", qr/wrong shape/ ],
	[ 'SCRIPT LOAD', qr/^SCRIPT LOAD /, '$40' . "\r\n" . ('0' x 40) . "\r\n",
		qr/SCRIPT LOAD of the \w+ script answered with another SHA1/ ],
	[ 'ROLE', qr/^ROLE$/, "+OK\r\n", qr/wrong shape/ ])
{
	my ($what, $pattern, $bytes, $why) = @$case;
	attack(
		name => "$what answered wrongly",
		setup => sub {
			$hostile->replace('*', $pattern, $bytes);
			$hostile->drop_all;
			RlockTest::wait_until(sub { last_error() =~ $why }, 5);
		},
		sql => "SELECT rlock_try('h:hs')",
		outcome => $e58030,
		why => $why);
}

#---- bytes that arrive oddly ----

attack(
	name => 'replies split byte by byte',
	setup => sub {
		$hostile->trickle('rlock_command', 1);
		$hostile->trickle('rlock_subscriber', 1);
	},
	sql => "BEGIN; SELECT rlock_try('h:split'), rlock_held('h:split'), rlock_ttl('h:split') IS NOT NULL; COMMIT",
	outcome => 'ok',
	out => qr/^t\|1\|t$/m);

{
	# the acquire runs, its reply is cut: the worker restates the count on
	# the next connection and sends the acquire again, which must not count
	# twice
	my $s = $node->background_psql('postgres');
	attack(
		name => 'a connection closed in the middle of a reply',
		before => sub {
			# a connection lost after a stable second is made again at once
			RlockTest::wait_until(
				sub {
					$node->safe_psql('postgres',
						"SELECT connection_since < now() - interval '1.2 s' FROM rlock_status()"
					) eq 't';
				},
				10);
		},
		setup => sub {
			$hostile->close_mid('rlock_command', $acquire, count => 1);
			is($s->query_safe(
					"SELECT rlock_session_try('h:mid'), rlock_held('h:mid')"),
				"t|1", 'the acquire works across the cut');
		},
		sql => "SELECT 1",
		outcome => 'ok',
		check => sub {
			my %fields = @{ db('HGETALL', 'h:mid') };
			delete $fields{mode};
			is(scalar(keys %fields), 1, 'one owner in Redis');
			is((values %fields)[0], 1,
				'holding one, not two: the resend restated the count');
		});
	$s->quit;
}

{
	# a forced release runs, its reply is cut: sent again it could remove
	# the lock of the waiter that the first one let in, so the caller
	# hears that the outcome is unknown and nothing is sent again
	my $w;
	attack(
		name => 'a forced release whose reply is cut',
		before => sub {
			RlockTest::wait_until(
				sub {
					$node->safe_psql('postgres',
						"SELECT connection_since < now() - interval '1.2 s' FROM rlock_status()"
					) eq 't';
				},
				10);
			db('HSET', 'h:fx', 'dead0000-1111-4222-8333-444455556666:1', 1);
			$w = $node->background_psql('postgres', on_error_stop => 0);
			RlockTest::send_query($w,
				"SELECT rlock_session_try('h:fx', '20s');");
			RlockTest::wait_until(
				sub {
					$node->safe_psql('postgres',
						"SELECT count(*) FROM rlock_locks WHERE key = 'h:fx' AND state = 'waiting'"
					) eq '1';
				},
				10);
		},
		setup => sub {
			$hostile->close_mid('rlock_command', qr/^EVALSHA $sha{force} /,
				count => 1);
		},
		sql => "SELECT rlock_force_release('h:fx')",
		outcome => qr/ERROR:  58030: could not reach Redis for lock "h:fx"\n.*DETAIL:  The connection to Redis was lost before it answered; the lock may or may not have been removed/s,
		check => sub {
			my ($out, $err) = RlockTest::collect($w);
			like($out, qr/^t$/m,
				'the waiter the forced release let in gets the lock')
			  or diag($err);
			my %fields = @{ db('HGETALL', 'h:fx') };
			delete $fields{mode};
			is(scalar(keys %fields), 1, 'the waiter is the one owner in Redis');
			isnt((keys %fields)[0], 'dead0000-1111-4222-8333-444455556666:1',
				'and the removed owner is gone');
		});
	$w->quit;
}

#---- the subscriber connection ----

# A waiter for a lock held elsewhere with a short lease: whatever happens
# to its subscription, its timer bounded by the lease lets it in.  $rule
# lies before the waiter comes, $push once it is subscribed.
sub waiter_case
{
	my (%a) = @_;
	my $name = $a{name};
	$hostile->clear;
	ok(RlockTest::wait_for_redis($node, 10), "$name: rlock works before");
	db('HSET', 'h:sub', 'dead0000-1111-4222-8333-444455556666:1', 1);
	db('PEXPIRE', 'h:sub', 2000);
	$a{rule}->() if $a{rule};
	my $w = $node->background_psql('postgres', on_error_stop => 0);
	RlockTest::send_query($w, "SELECT rlock_try('h:sub', '5s');");
	if ($a{push})
	{
		ok(RlockTest::wait_for_subscribers($redis, 'h:sub', 1, 5),
			"$name: the waiter is subscribed");
		$a{push}->();
	}
	my ($out, $err) = RlockTest::collect($w);
	$w->quit;
	is($out, 't', "$name: the waiter gets the lock once its lease is over")
	  or diag($err);
	if ($a{why})
	{
		ok(RlockTest::wait_until(sub { last_error() =~ $a{why} }, 5),
			"$name: rlock_status() says why")
		  or diag('last error: ' . last_error());
	}
	$a{check}->() if $a{check};
	survived($name);
	$hostile->clear;
	ok(RlockTest::wait_for_redis($node, 10),
		"$name: locks work again once the relay is honest");
	$node->safe_psql('postgres', "SELECT rlock_session_try('h:sub'), rlock_session_release('h:sub')");
}

# (the subscriber asks CLIENT ID right behind CLIENT SETNAME, for
# client-side tracking: the +OK meets that command)
waiter_case(
	name => 'an unsolicited +OK after CLIENT SETNAME',
	rule => sub {
		$hostile->after('rlock_subscriber', qr/^CLIENT SETNAME /, "+OK\r\n");
		$hostile->drop_all;
	},
	why => qr/a reply of the wrong shape \(a status of 2 bytes\) to a command/);

waiter_case(
	name => 'a message of one element',
	push => sub { $hostile->inject('rlock_subscriber', "*1\r\n\$7\r\nmessage\r\n") },
	why => qr/a published message of an unexpected shape \(an array of 1 elements\)/);

waiter_case(
	name => 'a message whose channel is an integer',
	push => sub {
		$hostile->inject('rlock_subscriber',
			"*3\r\n\$7\r\nmessage\r\n:5\r\n\$1\r\n0\r\n");
	},
	why => qr/a published message of an unexpected shape \(an array of 3 elements\)/);

waiter_case(
	name => 'a subscribe confirmation whose channel is an integer',
	rule => sub {
		$hostile->replace('rlock_subscriber', qr/^SUBSCRIBE /,
			"*3\r\n\$9\r\nsubscribe\r\n:1\r\n:1\r\n");
	},
	why => qr/a reply of the wrong shape \(an array of 3 elements\)/);

waiter_case(
	name => 'an unsubscribe whose count is not an integer',
	rule => sub {
		$hostile->replace('rlock_subscriber', qr/^UNSUBSCRIBE /,
			"*3\r\n\$11\r\nunsubscribe\r\n\$3\r\nabc\r\n\$1\r\nx\r\n");
	},
	why => qr/a reply of the wrong shape \(an array of 3 elements\)/);

# what a Redis spoken to in RESP3 sends for a published message: a push
waiter_case(
	name => 'a message as a RESP3 push',
	push => sub {
		my $channel = 'redisson_lock__channel:{h:sub}';
		$hostile->inject('rlock_subscriber',
			">3\r\n\$7\r\nmessage\r\n\$" . length($channel)
			  . "\r\n$channel\r\n\$1\r\n0\r\n");
	},
	why => resp3_refused('>', 'a push'));

{
	my $before;
	waiter_case(
		name => 'a message on a channel never subscribed',
		push => sub {
			$before = $hostile->connections('rlock_subscriber');
			$hostile->inject('rlock_subscriber',
				"*3\r\n\$7\r\nmessage\r\n\$27\r\nredisson_lock__channel:{zz}\r\n\$1\r\n0\r\n");
		},
		check => sub {
			is($hostile->connections('rlock_subscriber'), $before,
				'a message on a channel never subscribed is ignored, not a reason to reconnect');
		});
}

# WAIT behind synced acquisitions (rlock.sync_replicas) answered with a
# count below zero: no confirmation, the acquisition undone
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET rlock.sync_replicas = '1';
	ALTER SYSTEM SET rlock.sync_timeout = '200ms';
	SELECT pg_reload_conf()});
ok(RlockTest::wait_until(
		sub {
			$node->safe_psql('postgres', 'SELECT sync_connection FROM rlock_status()')
			  eq 'ready';
		},
		10),
	'the sync connection is up');
$hostile->replace('rlock_sync', qr/^WAIT /, ":-1\r\n");
{
	my ($rc, $out, $err) = timed_psql("SELECT rlock_try('h:wait')");
	like($err,
		qr/ERROR:  58030: Redis replicas did not confirm lock "h:wait" in time\n.*DETAIL:  0 of the 1 replicas/s,
		'a WAIT answer below zero: no confirmation, 58030');
}
survived('a WAIT answer below zero');
$hostile->clear;
ok(RlockTest::wait_until(sub { db('EXISTS', 'h:wait') == 0 }, 5),
	'the unconfirmed acquisition was undone');
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET rlock.sync_replicas;
	ALTER SYSTEM RESET rlock.sync_timeout;
	SELECT pg_reload_conf()});

ok(!grep({ $_ } map { db('EXISTS', $_) } qw(h:1 h:split h:mid h:11)),
	'nothing left held');

$watch->quit;
$node->stop;
$hostile->stop;
done_testing();
