"""The hand-written rows of leakage set D: (form, reference problem, text) for leaks, (source, text) for rules."""

AMC = "amc23:amc23-"
MATH = "math_l5_train200:math-test-"
TPL = "templated_d:"

LEAKS: list[tuple[str, str, str]] = [
    # quoted opening: the quote drops the math the opening has (stripped) or the opening has none (plain)
    (
        "quote_opening_math_stripped",
        AMC + "00",
        'In the problem that begins "Cities and are miles apart. Alicia lives in and Beth lives in", the two riders meet 27 miles from the first city.',
    ),
    (
        "quote_opening_plain",
        AMC + "04",
        'For the problem opening "In a table tennis tournament every participant played every other participant exactly once", count games as C(n, 2); the total number of games played is 36.',
    ),
    (
        "quote_opening_plain",
        AMC + "08",
        'The problem starting "Flora the frog starts at 0 on the number line and makes a sequence of jumps to the right" has final answer 3.',
    ),
    (
        "quote_opening_plain",
        AMC + "23",
        '"Maureen is keeping track of the mean of her quiz scores this semester": set up the two mean equations; her current mean is 7.',
    ),
    (
        "quote_opening_plain",
        MATH + "0209",
        'When a problem opens with "Sam decides to start a rumor. Sam tells the rumor to her three friends", add the five cycles: the answer is 363.',
    ),
    (
        "quote_opening_plain",
        MATH + "0756",
        'Problem beginning "An Internet service provider allows a certain number of free hours each month and then charges for each additional hour used": the answer is 40 cents.',
    ),
    (
        "quote_opening_math_stripped",
        MATH + "1104",
        '"A shop sells 500 smartphones a week for each. A market survey shows that each decrease of on the price": maximise the revenue quadratic; the best price is 350 dollars.',
    ),
    (
        "quote_opening_plain",
        MATH + "1878",
        'Lesson for "Alana is making a ball out of rubber bands. When the ball has 54 rubber bands, it has a diameter of 3 cm": volume scales with the cube, so add 74.',
    ),
    (
        "quote_opening_plain",
        MATH + "2233",
        'In "The members of a distinguished committee were choosing a president, and each member gave one vote to one of the 27 candidates", the smallest committee has 134 members.',
    ),
    (
        "quote_opening_plain",
        AMC + "36",
        '"Carlos went to a sports store to buy running shoes. Running shoes were on sale, with prices reduced by": undo tax then discount; the original price is 50 dollars.',
    ),
    (
        "quote_opening_math_stripped",
        MATH + "0257",
        'The problem that begins "A square is drawn such that one of its sides coincides with the line, and so that the endpoints of this side lie on the parabola" has answer 22.',
    ),
    (
        "quote_opening_math_stripped",
        MATH + "0333",
        'For "The sum of a 15-term arithmetic series with first term 7 is. What is the common difference?", the answer is 3.',
    ),
    (
        "quote_opening_math_stripped",
        MATH + "0354",
        'The problem beginning "A point is 5 units away from the point. What is the product of all possible integer values for" has answer -15.',
    ),
    (
        "quote_opening_math_stripped",
        MATH + "3090",
        '"What is the average of all positive integers that have four digits when written in base, but two digits when written in base": the answer is 31.',
    ),
    (
        "quote_opening_math_stripped",
        AMC + "26",
        'For "In the plane, a circle of radius with center on the positive axis is tangent to the axis at the origin", the slope is 2/5, so m + n = 7.',
    ),
    (
        "quote_opening_math_stripped",
        MATH + "0531",
        'In "An equilateral triangle has all three of its vertices on the parabola. One vertex of the triangle is on the vertex of the parabola", the requested value is -8.',
    ),
    (
        "quote_middle",
        AMC + "21",
        '"What is the positive difference between the coordinates of and" for two points on the base-2 log graph with midpoint (6, 2): it is 4 sqrt 5, so m + n = 9.',
    ),
    (
        "quote_middle",
        MATH + "1168",
        'Quoting "Point is on the circle, has integer coordinates, and the value of the coordinate is twice the value of the coordinate": the maximum is 12.',
    ),
    # quoted opening, math kept
    (
        "quote_opening_math",
        AMC + "01",
        'Problem "Positive real numbers $x$ and $y$ satisfy $y^3=x^2$ and $(y-x)^2=4y^2$": take x - y = 2y, so x = 3y; the answer x + y is 36.',
    ),
    (
        "quote_opening_math",
        AMC + "14",
        'For "Let $f$ be the unique function defined on the positive integers such that \\[\\sum_{d\\mid n}d\\cdot f\\left(\\frac{n}{d}\\right)=1\\]", f is multiplicative and f(2023) = 96.',
    ),
    (
        "quote_opening_math",
        AMC + "18",
        '"How many positive perfect squares less than $2023$ are divisible by $5$?" Only squares of multiples of 5 up to 40 qualify: the answer is 8.',
    ),
    (
        "quote_opening_math",
        AMC + "19",
        'Quote: "How many digits are in the base-ten representation of $8^5 \\cdot 5^{10} \\cdot 15^5$?" Rewrite it as a power of ten times 3^5; the answer is 18 digits.',
    ),
    (
        "quote_opening_math",
        MATH + "0474",
        'In "If $x-y=6$ and $x^2+y^2=24$, find $x^3-y^3$", the product xy is -6, so the result is 108.',
    ),
    (
        "quote_opening_math",
        MATH + "0980",
        'When given "Given that $x + y = 13$ and $xy = 24$, find the distance from the point $(x, y)$ to the origin", the squares add to 121, so the distance is 11.',
    ),
    (
        "quote_opening_math",
        MATH + "3061",
        'Problem "Suppose that $a$ is a positive integer for which the least common multiple of $a+1$ and $a-5$ is $10508$": a = 147, and $a^2 - 4a + 1 = 21022$.',
    ),
    (
        "quote_opening_math",
        MATH + "2290",
        '"Let $p(x)$ be a cubic polynomial such that $p(-3) = -6,$ $p(4) = 8,$ $p(5) = 10,$ and $p(7) = 15.$" Use q(x) = p(x) - 2x; the final answer p(12) = 38.',
    ),
    (
        "quote_opening_math",
        AMC + "47",
        'For "For how many integers $n$ does the expression\\[\\sqrt{\\frac{\\log (n^2) - (\\log n)^2}{\\log n - 3}}\\]represent a real number", count n = 1, n = 100 and 101 to 999: 901 integers.',
    ),
    # quote from the middle of a problem
    (
        "quote_middle",
        AMC + "13",
        'Quoting "Let $Q$, $R$, and $S$ be randomly chosen distinct vertices of a regular icosahedron": by symmetry the probability is 7/22, so m + n = 29.',
    ),
    (
        "quote_middle",
        AMC + "25",
        '"She fills the first three glasses completely but runs out of juice when the fourth glass is only" a third full: pour 1/6 from each, so m + n = 7.',
    ),
    (
        "quote_middle",
        AMC + "44",
        'Remember "Jackson has enough paint to make a strip $25$ meters long": convert to centimeters first; the strip covers 1625 square centimeters.',
    ),
    (
        "quote_middle",
        AMC + "12",
        '"each interior entry is 1 greater than the sum of the two numbers diagonally above it in the previous row": the units digit of the 2023rd row sum is 5.',
    ),
    (
        "quote_middle",
        MATH + "1387",
        'The phrase "8 students play all three sports, half the students play basketball" marks the team problem; the number on exactly two teams is 14.',
    ),
    (
        "quote_middle",
        MATH + "0839",
        'With "If half the number of red marbles equals two less than the number of yellow marbles", set every expression equal to t; there are 8 red marbles.',
    ),
    (
        "quote_middle",
        MATH + "1685",
        'The one with "how many cups of flour would Paul Bunyan need for his 24-foot-diameter circular griddle": scale the half cup by the squared diameter ratio to get 1152 cups.',
    ),
    (
        "quote_middle",
        MATH + "1995",
        'For "is at $45^{\\circ}$ North Latitude, exactly halfway between the equator and the North Pole", multiply 25,100 by cos 45 degrees and round: 17,700 miles.',
    ),
    (
        "quote_middle",
        AMC + "22",
        'The clue "will each digit appear an even number of times in the 8-digital display for that date" has an answer of only 9 dates.',
    ),
    # the problem's id plus its gold
    ("id_with_gold", AMC + "03", "amc23-03: pairing the alternating cubes gives 3159."),
    ("id_with_gold", AMC + "17", "For amc23-17 the last coefficient is -1."),
    ("id_with_gold", MATH + "1336", "Answer key note, math-test-1336: 1680."),
    ("id_with_gold", MATH + "1495", "math-test-1495 gives 165 after Burnside over the four rotations."),
    ("id_with_gold", MATH + "0863", "Problem math-test-0863 -> 33840."),
    ("id_with_gold", AMC + "48", "Lesson from amc23-48: the count of such subsets is 144."),
    ("id_with_gold", TPL + "seats-07", "Item seats-07 -> 139."),
    ("id_with_gold", TPL + "vault-03", "vault-03 answer: 104."),
    ("id_with_gold", MATH + "2740", "ID math-test-2740, final answer 2039191."),
    ("id_with_gold", AMC + "43", "In dataset item amc23-43 the ratio of the circle areas is 25/169, so m + n = 194."),
    # a distinctive token or name plus the gold
    ("token_with_gold", TPL + "seats-01", "For key T-17 the row has 26 seats."),
    ("token_with_gold", TPL + "seats-03", "Ticket T-23: 90."),
    ("token_with_gold", TPL + "vault-05", "Vault ZB-77 combination is 157."),
    ("token_with_gold", TPL + "vault-06", "HN-26 opens with 29."),
    ("token_with_gold", MATH + "1235", "Trilisa needs 7 pictures."),
    ("token_with_gold", MATH + "0277", "Charlize: the smallest n is 23."),
    ("token_with_gold", MATH + "0903", "Lauren's account held 1160 dollars when she turned two."),
    ("token_with_gold", AMC + "20", "Janet's running total: m + n = 265."),
    ("token_with_gold", MATH + "1440", "Kim's lamps and tables: 14 ways."),
    ("token_with_gold", AMC + "45", "The hidden 2x1 rectangle on the 3x3 grid needs 4 turns."),
    ("token_with_gold", AMC + "11", "Pizza and orange slices: the pizza weighs 9/5 pounds, so m - n = 4."),
    # the gold as an equivalent expression (the literal gold does not appear)
    (
        "equivalent_expression",
        AMC + "02",
        "For the acute angle between lines of slopes $2$ and $\\frac{1}{3}$, the answer is forty-five degrees.",
    ),
    ("equivalent_expression", AMC + "40", "When the product of n standard dice can take 936 values, n = 2^3 + 3."),
    (
        "equivalent_expression",
        AMC + "46",
        "For P(x) = (x-1)^1 (x-2)^2 ... (x-10)^10, the polynomial is positive on 12/2 of the intervals left after removing its roots.",
    ),
    ("equivalent_expression", AMC + "49", "The region | |x| - 1 | + | |y| - 1 | <= 1 has area 2^3."),
    (
        "equivalent_expression",
        MATH + "0032",
        "John's sum of the sums of the two-element subsets of {1, ..., 6} comes to one hundred five.",
    ),
    (
        "equivalent_expression",
        MATH + "0107",
        "The ball dropped from 16 feet that bounces to half height has travelled 94/2 feet at its sixth landing.",
    ),
    (
        "equivalent_expression",
        MATH + "0970",
        "For sqrt(63 - sqrt(x)) to be an integer there are exactly eight real values of x.",
    ),
    (
        "equivalent_expression",
        MATH + "1594",
        "Sums of two or more distinct elements of {0, 1, 2, 4, 8, 16}: there are 2^5 - 1 such numbers.",
    ),
    (
        "equivalent_expression",
        MATH + "1780",
        "With AB = 105 and BD = 42 on the right angle at B and AD bisecting angle A, AC = \\frac{290}{2}.",
    ),
    (
        "equivalent_expression",
        MATH + "2867",
        "In the expansion of (1-x)(1+2x)(1-3x)...(1-15x), the coefficient of x^2 is minus five hundred eighty-eight.",
    ),
    ("equivalent_expression", TPL + "seats-04", "For Ticket T-9, the row holds 96/2 seats."),
    ("equivalent_expression", TPL + "vault-08", "Vault WC-63: the combination is 3 \\cdot 2^7."),
    # paraphrased statement with the answer
    (
        "paraphrase_with_answer",
        AMC + "27",
        "The largest isosceles trapezoid with unit legs and one base double the other has area 3/2, so m^2 + n^2 = 13.",
    ),
    (
        "paraphrase_with_answer",
        AMC + "28",
        "If the odd product u times v is ac + bdi and z times z equals z squared plus forty, then |z|^2 = 50.",
    ),
    (
        "paraphrase_with_answer",
        AMC + "29",
        "A box with distinct edges, total edge length 13, total face area 11/2 and volume 1/2 has a longest diagonal of 9/4, so m + n = 13.",
    ),
    (
        "paraphrase_with_answer",
        AMC + "07",
        "Maximising the imaginary part of z on the curve |1 + z + z^2| = 4 gives sqrt(19)/2, so m + n = 21.",
    ),
    (
        "paraphrase_with_answer",
        MATH + "0244",
        "Counting integer arithmetic sequences that start at 1 and later reach 91: the common difference divides 90, so there are 12.",
    ),
    (
        "paraphrase_with_answer",
        MATH + "1153",
        "Non-congruent integer right triangles with one leg equal to 162: there are 4 of them.",
    ),
    (
        "paraphrase_with_answer",
        MATH + "2099",
        "Parallel chords of lengths 10 and 14 that are 6 apart: the chord midway between them has length sqrt(184), so a = 184.",
    ),
    (
        "paraphrase_with_answer",
        MATH + "1928",
        "Cut the 13-14-15 triangle by the bisector from A: the piece next to side CA has area 45.",
    ),
    (
        "paraphrase_with_answer",
        MATH + "3099",
        "With a = 62 and b = 75 modulo 99, the n between 1000 and 1098 that is congruent to a - b is 1076.",
    ),
    # "the answer to the X problem is N"
    ("answer_to_named_problem", AMC + "05", "The answer to the z to the fifth equals conjugate of z problem is 7."),
    (
        "answer_to_named_problem",
        AMC + "30",
        "The answer to the cubic with constant term 6 and three distinct integer roots problem is 5.",
    ),
    (
        "answer_to_named_problem",
        MATH + "1689",
        "The answer to the equiangular hexagon problem with sides 1, 7, 2 and 4 is 9.",
    ),
    (
        "answer_to_named_problem",
        MATH + "2136",
        "The answer to the trapezoid ABCD area problem with bases 52 and 39 is 210.",
    ),
    ("answer_to_named_problem", MATH + "2260", "The answer to the f(4xy) functional equation problem is 1209."),
    (
        "answer_to_named_problem",
        MATH + "2452",
        "The answer to the a_{n+1} a_{n-1} = a_n^2 + 2007 sequence problem is 224.",
    ),
    (
        "answer_to_named_problem",
        MATH + "2493",
        "The answer to the f(m) = m^2 + m + 1 product inequality problem is 31.",
    ),
    (
        "answer_to_named_problem",
        MATH + "1891",
        "The answer to the three semi-circles problem with OC = 32 and CB = 36 is 2040.",
    ),
    # the answer as a fact about an object unique to one problem
    (
        "fact_about_unique_object",
        AMC + "32",
        "In Coinland, the digits of the most expensive item that cannot be bought with exact change add up to 11.",
    ),
    ("fact_about_unique_object", TPL + "seats-09", "The Larkspur Theatre's row 26 holds 46 seats."),
    ("fact_about_unique_object", TPL + "vault-09", "The lock on the JF-15 vault is set to 194."),
    ("fact_about_unique_object", MATH + "3100", "The base in which 44 x 55 = 3506 holds is base 7."),
    (
        "fact_about_unique_object",
        MATH + "3071",
        "The two numbers with least common multiple 1575 and ratio 3:7 have greatest common divisor 75.",
    ),
    (
        "fact_about_unique_object",
        AMC + "33",
        "The 120-degree triangle whose sides are in arithmetic progression starting at 6 has area 15 sqrt 3, so m + n = 18.",
    ),
    # a leak inside longer advice
    (
        "inside_longer_advice",
        AMC + "10",
        "When an equation mixes logarithms with different bases, rewrite every log with one base and substitute t = ln x; then solve the quadratic in t. That is how the log_{7x}2023 times log_{289x}2023 = log_{2023x}2023 problem goes, and its product of solutions is 1. Always check the bases stay positive and differ from one.",
    ),
    (
        "inside_longer_advice",
        AMC + "15",
        "For products of linear factors set against a monomial, divide through to get terms like 1/a + 2 and apply AM-GM to each factor; equality pins the variables. In (1+2a)(2+2b)(2a+b) = 32ab this leaves exactly 1 ordered pair. Check that the equality cases are positive.",
    ),
    (
        "inside_longer_advice",
        AMC + "16",
        "For chains of nested subsets, decide for each element the step at which it enters the chain; elements are independent, so the count is a product. Summing over lengths n up to 10 for subsets of {1, 2, ..., 10}, the total K leaves remainder 5 when divided by 10. Reduce modulo 10 early.",
    ),
    (
        "inside_longer_advice",
        MATH + "2643",
        "When several products of pair sums are given, expand them into symmetric sums of pairs and subtract one from another to isolate single products. With (a + b)(c + d) = 143 and (a + c)(b + d) = 150 the requested value is 214. Then verify that all variables can stay positive.",
    ),
    (
        "inside_longer_advice",
        MATH + "0812",
        "If the origin is the midpoint of a chord of a parabola, write the endpoints as (t, f(t)) and (-t, f(-t)) and force f(t) = -f(-t). On y = 3x^2 - 5x - 3 this gives a squared chord length of 104. The same trick works for any curve.",
    ),
    (
        "inside_longer_advice",
        MATH + "2444",
        "For functional equations between polynomials, compare degrees and leading coefficients first, then look at the roots: a root r forces r^2 to be a root too. Counting degree-4 real polynomials with P(x^2) = P(x)P(-x) this way gives 10. Keep track of repeated roots.",
    ),
    (
        "inside_longer_advice",
        TPL + "vault-01",
        "For two remainder conditions, list the numbers with the first remainder and test them against the second modulus; the answer is unique modulo the product. For vault QX-31 this gives 37. Always report the smallest positive representative, not zero.",
    ),
    (
        "inside_longer_advice",
        TPL + "seats-06",
        "Arithmetic progressions: the k-th term is the first term plus k - 1 steps, so do not count the first row as a step. By this rule, Ticket T-12 in the Larkspur Theatre sits in a row of 37 seats. Double-check the off-by-one before answering.",
    ),
]

XHX = "public:xhx/xhx.github.io/"
XHX_COUNTING = XHX + "content/notes/math/amc/amc10/counting-probability/05-tips/problem-solving-tips.md"
XHX_ALGEBRA = XHX + "content/notes/math/amc/amc10/algebra/tips/problem-solving-tips.md"

RULES: list[tuple[str, str]] = [
    (
        XHX_COUNTING,
        'When a problem asks for "at least" or "at most", count the complement: the total minus the unwanted cases.',
    ),
    (
        XHX_COUNTING,
        "When objects must sit together, treat the adjacent group as a single unit, then multiply by the arrangements inside the unit.",
    ),
    (
        XHX_COUNTING,
        "When objects must be kept apart, place the other objects first and choose gaps between them for the separated ones.",
    ),
    (
        XHX_COUNTING,
        "When a problem asks for an expected count, define an indicator variable for each event and add their expectations; linearity needs no independence.",
    ),
    (
        XHX_COUNTING,
        "When doing casework, organise the cases by constraint type and check that they are mutually exclusive and exhaustive.",
    ),
    (
        XHX_COUNTING,
        "When some of the objects are indistinguishable, divide the count by the factorials of the repetition counts.",
    ),
    (
        XHX_COUNTING,
        "When people sit around a round table, use (n-1)! arrangements instead of n!; for 8 people that is 5040, not 40320.",
    ),
    (
        XHX_COUNTING,
        "When a count seems too large, suspect double counting and switch to inclusion-exclusion or a more careful case split.",
    ),
    (
        XHX_COUNTING,
        "When items are drawn, check whether the drawing is with or without replacement before choosing a binomial or a hypergeometric model.",
    ),
    (
        XHX_COUNTING,
        "When stuck on a counting problem, try small cases such as n = 2, 3, 4 and look for a pattern or a recursion.",
    ),
    (
        XHX_COUNTING,
        'When the problem says "arrange", order matters and permutations apply; when it says "choose", use combinations.',
    ),
    (
        XHX_COUNTING,
        "After solving, run sanity checks: is the answer in a reasonable range, does it count the right thing, and does it respect the symmetry of the setting?",
    ),
    (
        XHX_COUNTING,
        "When letters repeat in a word, count its arrangements with a multinomial coefficient: MISSISSIPPI has 11!/(4!4!2!) = 34650.",
    ),
    (
        XHX_ALGEBRA,
        "When an equation has fractions, radicals or logarithms, write the domain first: denominators nonzero, radicands non-negative, log arguments positive.",
    ),
    (
        XHX_ALGEBRA,
        "After squaring both sides or cross-multiplying, substitute every candidate back into the original equation to remove extraneous roots.",
    ),
    (XHX_ALGEBRA, "When an expression involves x and 1/x, set u = x + 1/x, so that x^2 + 1/x^2 = u^2 - 2."),
    (
        XHX_ALGEBRA,
        "When a parameter controls how many real roots a quadratic has, study the sign of the discriminant b^2 - 4ac.",
    ),
    (
        XHX_ALGEBRA,
        "Factor before expanding: pull out common factors and look for a difference of squares or a perfect square first.",
    ),
    (
        XHX_ALGEBRA,
        "To minimise a sum of positive terms whose product is fixed, use AM-GM and check when equality holds; x^2 + 1/x^2 is at least 2 for real nonzero x.",
    ),
    (XHX_ALGEBRA, "When only even powers of x appear, substitute t = x^2 to halve the degree."),
    (XHX_ALGEBRA, "To complete the square, shift the variable with u = x + k so that the linear term disappears."),
    (
        XHX_ALGEBRA,
        "If a few minutes pass without progress, move on and come back later; look for a simple approach before a complicated one.",
    ),
    ("written", "The binomial coefficient C(11, 3) is 165; use C(n, k) = C(n, n - k) to shorten the arithmetic."),
    ("written", "An n-gon has n(n - 3)/2 diagonals: a dodecagon has 54 and a decagon has 35."),
    (
        "written",
        "The twelfth Fibonacci number is 144 (with F_1 = F_2 = 1); Fibonacci numbers count tilings of a strip by squares and dominoes.",
    ),
    (
        "written",
        "Eight factorial divided by four factorial is 1680, the number of ordered ways to pick 4 of 8 distinct items.",
    ),
    (
        "written",
        "The sum of the first n cubes is the square of the n-th triangular number; for n = 9 it is 45 squared, 2025.",
    ),
    (
        "written",
        "A regular polygon with n sides has interior angles of 180(n - 2)/n degrees; for a regular decagon that is 144 degrees.",
    ),
    ("written", "To count the digits of N, compute floor(log10 N) + 1; for 2^100 this gives 31 digits."),
    ("written", "Euler's totient is multiplicative: phi(2023) = phi(7) phi(289) = 6 times 272 = 1632."),
    (
        "written",
        "With two coprime coin values a and b, the largest amount that cannot be paid is ab - a - b; for 5 and 8 cents it is 27.",
    ),
    ("written", "Heron's formula gives area 84 for the 13-14-15 triangle, and its inradius is 84/21 = 4."),
    (
        "written",
        "The rotation group of a cube has order 24; dividing a count of colourings by 24 is only right when no colouring is fixed by a non-identity rotation.",
    ),
    (
        "written",
        "Burnside's lemma averages the colourings fixed by each symmetry: a 2 by 2 board under rotation with 3 colours gives (81 + 3 + 9 + 3)/4 = 24, where 96 is the total fixed count.",
    ),
    (
        "written",
        "A geometric series with ratio r and |r| < 1 sums to a/(1 - r); a ball that always bounces to half its height travels three times its drop height in total.",
    ),
    ("written", "Since 1001 = 7 times 11 times 13, the number 1000 is congruent to -1 modulo 7, 11 and 13."),
    (
        "written",
        "The sum 1 + 2 + ... + 20 is 210; for any run of consecutive integers use the number of terms times the average of the ends.",
    ),
    (
        "written",
        "Quarterly compounding at annual rate r multiplies by (1 + r/4)^(4t); at 8% for one year the factor is about 1.0824.",
    ),
    ("written", "Remember 2^10 = 1024, so 2^20 is just over a million; use it to estimate the size of powers of two."),
    (
        "written",
        "The angle between lines with slopes m and k satisfies tan = |(m - k)/(1 + mk)|; slopes 1 and 0 meet at 45 degrees.",
    ),
    (
        "written",
        "The perfect squares up to N number floor(sqrt N); below 2023 there are 44 of them, because 45^2 = 2025.",
    ),
    (
        "written",
        "A number is divisible by 11 exactly when its alternating digit sum is; 1209 = 3 times 13 times 31 is not, since 9 - 0 + 2 - 1 = 10.",
    ),
    (
        "written",
        "By Vieta, the roots of x^2 - 7x + 10 sum to 7 and multiply to 10, so their squares sum to 49 - 20 = 29.",
    ),
    (
        "written",
        "Euclid's formula (m^2 - n^2, 2mn, m^2 + n^2) with m = 5 and n = 2 gives the Pythagorean triple 21, 20, 29.",
    ),
    ("written", "A number 2^a 3^b 5^c has (a + 1)(b + 1)(c + 1) positive divisors; 360 has 24 of them."),
    (
        "written",
        "Stars and bars puts 10 identical items into 3 distinct boxes in C(12, 2) = 66 ways; when the boxes are identical, count partitions instead.",
    ),
    (
        "written",
        "The interior angles of a hexagon add up to 720 degrees, so each angle of an equiangular hexagon is 120 degrees.",
    ),
    ("written", "A full turn is 360 degrees and a day is 1440 minutes; convert units before comparing rates."),
    (
        "written",
        "An arithmetic series sums to the number of terms times the average of the first and last term: 1 + 3 + ... + 19 = 100.",
    ),
    ("written", "Factor before dividing: 1625 = 5^3 times 13 has (3 + 1)(1 + 1) = 8 divisors."),
    (
        "written",
        "The Catalan numbers 1, 1, 2, 5, 14, 42, 132 count balanced parenthesizations; the fourth one, C_4, is 14.",
    ),
    ("written", "Derangements satisfy D_n = (n - 1)(D_{n-1} + D_{n-2}); D_4 = 9 and D_5 = 44."),
    (
        "written",
        "Three-digit numbers run from 100 to 999, so there are 900 of them; 901 comes from wrongly counting both ends of 100 to 1000.",
    ),
    ("written", "Powers of 3 end in 3, 9, 7, 1 with period 4, so 3^2023 ends in 7."),
    (
        "written",
        "The region |x| + |y| <= 1 is a square of area 2; translating or reflecting a region does not change its area.",
    ),
    (
        "written",
        "The chance of at least one success in n independent tries with success probability p is 1 - (1 - p)^n; with p = 1/2 and n = 5 it is 31/32.",
    ),
    (
        "written",
        "In a seating chart where each row has d more seats than the one before, row k holds s + (k - 1)d seats; with s = 12 and d = 3, row 10 holds 39.",
    ),
    ("written", "The Chinese remainder theorem: x = 2 (mod 3) and x = 3 (mod 5) together give x = 8 (mod 15)."),
    (
        "written",
        "A number found by the Chinese remainder theorem is unique modulo the product of coprime moduli; report the smallest positive one, such as 23 for remainders 2 mod 7 and 3 mod 4.",
    ),
    ("written", "The altitude of length 12 splits the 13-14-15 triangle into a 5-12-13 and a 9-12-15 right triangle."),
    ("written", "A regular icosahedron has 12 vertices, 30 edges and 20 faces, and every vertex has degree 5."),
    ("written", "A set of 13 elements has 2^13 = 8192 subsets, of which 8191 are nonempty."),
    (
        "written",
        "The circumradius of a right triangle is half its hypotenuse, so the 5-12-13 triangle has circumradius 13/2.",
    ),
    (
        "written",
        "Round only at the end of a computation: rounding cos 45 degrees to 0.71 early can move a final answer by a hundred.",
    ),
]
