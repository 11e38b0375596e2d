# rlock's all-or-nothing sets of locks (rlock_try_set) against Redisson's
# RedissonMultiLock over getLock of the same names, for each Redisson
# version of RlockTest::Redisson:
#
# - a set overlapping a Java MultiLock is refused whole (no member taken)
#   and, waiting, is woken by the MultiLock's unlock; a MultiLock
#   overlapping a SQL set is refused (Redisson gives back the members it
#   took) and, waiting, is woken by the commit, and by rlock_release_set
#   before it;
# - the shared keys of a set admit Java read locks and keep Java write
#   locks out;
# - four Java threads, each a MultiLock over two of four names, and four
#   SQL sessions taking two of them in the other order contend for 5 s:
#   nobody waits out a 10 s bound (no deadlock), and no name is ever held
#   by two at once (intervals recorded on both sides, each inside the
#   time the locks were held).
#
# Skipped until rlock_try_set exists (issue 28).
use strict;
use warnings;

use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('multi', $redis,
	conf => [ 'log_min_messages = warning', 'log_statement = none' ]);

sub sql { return $node->safe_psql('postgres', $_[0]) }


sub running
{
	my ($s) = @_;
	return RlockTest::count_active($node, $s->{rlock_pid}) == 1;
}

sub exists_ { return $redis->cmd('EXISTS', $_[0]) }

sql(q{
	CREATE TABLE sets (i int PRIMARY KEY, keys text[]);
	CREATE TABLE setspans (k text, s bigint, e bigint);
	CREATE TABLE setmisses (i int);
});
my $dir = PostgreSQL::Test::Utils::tempdir();
open(my $f, '>', "$dir/set.sql") or die $!;
print $f <<'EOF';
\set i random(1, 4)
BEGIN;
SELECT rlock_try_set(keys, '10 s')::int AS got FROM sets WHERE i = :i \gset
\if :got
SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint AS s \gset
SELECT pg_sleep(random() * 0.003);
INSERT INTO setspans SELECT k, :s, (extract(epoch FROM clock_timestamp()) * 1e6)::bigint FROM sets, unnest(keys) k WHERE i = :i;
\else
INSERT INTO setmisses VALUES (:i);
\endif
COMMIT;
EOF
close($f);

for my $version (@RlockTest::Redisson::VERSIONS)
{
	my $java = RlockTest::Redisson->start($redis, version => $version);
	my $v = "[$version]";
	my $s = RlockTest::session($node);
	my ($ka, $kb, $kc) = map { "m$_:$version" } 'a', 'b', 'c';
	my $multi = "$ka,$kb";

	#---- SQL behind a Java MultiLock ----

	is($java->call('j.1', 'multi.trylock', $multi, 0), 'true', "$v Java's MultiLock on a, b");
	is($s->query_safe("BEGIN; SELECT rlock_try_set(ARRAY['$kb', '$kc'])"), 'f',
		"$v SQL's set b, c is refused");
	is(exists_($kc), 0, "$v and took nothing of it (c free)");
	$s->query_safe('ROLLBACK');
	RlockTest::send_query($s, "BEGIN; SELECT rlock_try_set(ARRAY['$kb', '$kc'], '30 s');");
	ok(RlockTest::wait_until(sub { running($s) }, 10), "$v SQL waits for the set");
	ok(!RlockTest::wait_until(sub { !running($s) }, 0.5), "$v and goes on waiting");
	is(exists_($kc), 0, "$v holding no member meanwhile");
	my $t0 = time;
	$java->call('j.1', 'multi.unlock', $multi);
	my ($out, $err) = RlockTest::collect($s);
	is($out, 't', "$v the MultiLock's unlock lets SQL take the set") or diag($err);
	cmp_ok(time - $t0, '<', 3, "$v at once");
	is(exists_($kb) + exists_($kc), 2, "$v both members held");

	#---- a Java MultiLock behind SQL ----

	is($java->call('j.1', 'multi.trylock', $multi, 0), 'false',
		"$v Java's MultiLock over a, b is refused");
	is(exists_($ka), 0, "$v and gave back a");
	my $id = $java->send('k.1', 'multi.trylock', $multi, 30000);
	ok(!$java->result($id, 0.5), "$v a MultiLock waits");
	$t0 = time;
	$s->query_safe('COMMIT');
	my $r = $java->result($id, 20);
	ok($r && $r->{value} eq 'true', "$v the commit lets the MultiLock in");
	cmp_ok($r->{at} - $t0, '<', 3, "$v at once") if $r;
	is($s->query_safe("BEGIN; SELECT rlock_try_set(ARRAY['$kc', '$ka'])"), 'f',
		"$v SQL's set c, a is refused");
	is(exists_($kc), 0, "$v and took nothing of it (c free)");
	$s->query_safe('ROLLBACK');
	$java->call('k.1', 'multi.unlock', $multi);

	# rlock_release_set gives the set back before the transaction ends
	is($s->query_safe("BEGIN; SELECT rlock_try_set(ARRAY['$ka', '$kb'])"), 't',
		"$v SQL takes a, b");
	$id = $java->send('k.1', 'multi.trylock', $multi, 30000);
	ok(!$java->result($id, 0.3), "$v a MultiLock waits");
	$t0 = time;
	is($s->query_safe("SELECT rlock_release_set(ARRAY['$ka', '$kb'])"), 2,
		"$v rlock_release_set gives back two");
	$r = $java->result($id, 20);
	ok($r && $r->{value} eq 'true', "$v and lets the MultiLock in before the commit");
	cmp_ok($r->{at} - $t0, '<', 3, "$v at once") if $r;
	$s->query_safe('COMMIT');
	$java->call('k.1', 'multi.unlock', $multi);

	#---- shared keys ----

	is( $s->query_safe(
			"BEGIN; SELECT rlock_try_set(ARRAY['$ka'], '0', NULL, ARRAY['$kb'])"),
		't', "$v SQL takes a, and b shared");
	is($java->call('r.1', 'read.trylock', $kb, 0), 'true', "$v a Java read lock on b shares it");
	is($java->call('w.1', 'write.trylock', $kb, 0), 'false', "$v a Java write lock on b is refused");
	is($java->call('w.1', 'trylock', $ka, 0), 'false', "$v a Java lock on a is refused");
	$java->call('r.1', 'read.unlock', $kb);
	$s->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { exists_($ka) + exists_($kb) == 0 }, 10),
		"$v the commit gives both back");

	#---- contention on overlapping sets ----

	my @n = map { "mx$_:$version" } 0 .. 3;
	# Java's members in one order (a MultiLock waits on a member while
	# holding the ones before: other orders deadlock Redisson against
	# itself), SQL's sets in the other
	my @jsets = ([ @n[0, 1] ], [ @n[1, 2] ], [ @n[2, 3] ], [ @n[0, 3] ]);
	sql('TRUNCATE sets, setspans, setmisses');
	for my $i (1 .. 4)
	{
		my @rev = reverse @{ $jsets[ $i - 1 ] };
		sql("INSERT INTO sets VALUES ($i, ARRAY['$rev[0]', '$rev[1]'])");
	}
	my @orders;
	for my $t (0 .. 3)
	{
		my $set = join(',', @{ $jsets[$t] });
		for (1 .. 150)
		{
			push @orders, [ $t, $java->send("c$t.1", 'multi.trylock', $set, 10000, 30000),
				$java->send("c$t.1", 'sleep', 2),
				$java->send("c$t.1", 'multi.unlock', $set) ];
		}
	}
	my ($bout, $berr);
	my $bench = IPC::Run::run(
		[ 'pgbench', '-n', '-c', '4', '-j', '1', '-T', 5, '-f', "$dir/set.sql",
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$bout, '2>', \$berr);
	ok($bench, "$v four SQL sessions took sets") or diag("$bout\n$berr");
	my (%spans, $jmiss, $jfail, $jsections);
	($jmiss, $jfail, $jsections) = (0, 0, 0);
	for my $o (@orders)
	{
		my ($t, $lock, $sleep, $unlock) = @$o;
		my $lr = $java->result($lock, 60);
		$java->result($sleep, 60);
		my $ur = $java->result($unlock, 60);
		if (!$lr || !$lr->{ok}) { $jfail++; next }
		if ($lr->{value} ne 'true') { $jmiss++; next }
		$jfail++ unless $ur && $ur->{ok};
		$jsections++;
		push @{ $spans{$_} }, [ int($lr->{at} * 1e6 + 0.5), int($ur->{start} * 1e6 + 0.5) ]
		  for @{ $jsets[$t] };
	}
	is($jfail, 0, "$v every Java order ended without an error");
	is($jmiss, 0, "$v no Java MultiLock waited out 10 s");
	is(sql('SELECT count(*) FROM setmisses'), 0, "$v no SQL set waited out 10 s");
	for (split /\n/, sql('SELECT k, s, e FROM setspans'))
	{
		my ($k, $st, $e) = split /\|/;
		push @{ $spans{$k} }, [ $st, $e ];
	}
	my $sqlsections = sql('SELECT count(*) / 2 FROM setspans');
	cmp_ok($sqlsections, '>', 0, "$v SQL took sets ($sqlsections)");
	cmp_ok($jsections, '>', 0, "$v Java took MultiLocks ($jsections)");
	is(join(',', map { RlockTest::most_at_once(@{ $spans{$_} // [] }) } @n),
		'1,1,1,1', "$v no name held by two at once");
	ok(RlockTest::wait_until(sub { join('', map { exists_($_) } @n) eq '0000' }, 10),
		"$v nothing left held");

	$s->quit;
	$java->stop;
}

$node->stop;
$redis->stop;
done_testing();
